"""A command's run session: which run folder it works in, the checkpoint it loads, and its record there.

``fit`` creates a run folder (or continues one: ``folders.plan_run`` decides), writes its ``config.yaml`` once,
and records a session in ``provenance.yaml`` from start to end; ``validate``, ``test``, ``predict`` and the kit's
subcommands only read a run. Every check comes first: a bad checkpoint or a run that would be overwritten exits 2
with every file untouched, and a command refused before it trained takes its new run folder back.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only

from ..legacy import current_names
from ..observe.first_screen import closing_block, run_line
from ..safety.checkpoints import check_checkpoint, read_checkpoint
from ..safety.compiled_keys import load_either_form
from ..safety.elastic import DataLayout, check_processes, saved_layout
from ..safety.lost_store import threads_quiet
from ..store import RunPath, StorePath, location, remove_tree
from .folders import LIGHTNING_ALIASES, RunDirectory, RunPlan, plan_run
from .lock import RunLock
from .provenance import Provenance, RunRecord, describe_origin

FIT_ONLY = ("ckpt_path", "weights_only")
"""``fit``'s own arguments, left out of a run's ``config.yaml``: the other subcommands refuse them."""


@dataclass
class RunSession:
    """The run a command works on (see the module); built once the model exists, before the Trainer."""

    subcommand: str | None
    plan: RunPlan | None = None
    record: RunRecord | None = None  # set for `fit` only: the run it writes
    origin: dict[str, Any] | None = None  # epoch, step and provenance of the checkpoint it loads
    layout: DataLayout | None = None  # how the data of the checkpoint `fit` starts from is laid out over processes
    directory: RunPath = field(default_factory=Path)
    lock: RunLock | None = None  # held by the process that writes the run (fit, global rank 0)
    trainer: pl.Trainer | None = None  # set when the session starts (fit)
    program: str = ""  # the command's program, for the commands of the closing block

    def prepare(
        self,
        run: RunDirectory,
        trainer_config: dict[str, Any],
        ckpt_path: str | None,
        model: pl.LightningModule,
        seed: object = None,
    ) -> str | None:
        """Decides the run folder and the checkpoint, creates the folder for ``fit``; returns the checkpoint to load
        (which ``model`` loads with or without ``torch.compile``'s ``_orig_mod.`` in its keys: ``compiled_keys.py``).

        Raises ``ValueError`` for a checkpoint that cannot be used or a run that would be overwritten. Only the
        process of global rank 0 creates a run (the one Lightning's DDP launcher starts the others from): other
        processes get its directory through ``trainer.log_dir``, which Lightning broadcasts.
        """
        load_either_form(model)  # its checkpoints' keys with or without torch.compile's `_orig_mod.`
        # `fast_dev_run` writes no checkpoints and no logs: it gets no run either.
        fitting = self.subcommand == "fit" and not trainer_config.get("fast_dev_run")
        writer = is_global_zero_process()
        plan = plan_run(run, location(trainer_config.get("default_root_dir") or "."), fitting, ckpt_path, writer)
        if plan.ckpt_path is not None and plan.ckpt_path not in LIGHTNING_ALIASES:
            if not plan.resumed:  # a resume says first which keys of its command differ (check_resume)
                check_checkpoint(plan.ckpt_path, model)
            loaded = read_checkpoint(plan.ckpt_path)  # mapped, not read: cheap even for large files
            self.origin = {key: loaded.get(key) for key in ("epoch", "global_step", "provenance")}
            self.layout = saved_layout(loaded) if fitting else None
        if ckpt_path == "last" and fitting and plan.ckpt_path is None:
            rank_zero_info(
                f"--ckpt_path last: nothing to resume in {plan.directory or plan.experiment_dir} yet;"
                " training starts from scratch"
            )
        self.plan = plan
        if not fitting:
            if self.origin is not None:
                rank_zero_info(describe_origin(self.origin, str(plan.ckpt_path)))
            self.directory = plan.directory or plan.experiment_dir
            return plan.ckpt_path
        if writer and plan.directory is not None and plan.directory.exists():
            self.lock = RunLock(plan.directory)  # before anything is written: one process at a time
            self.lock.acquire()
        self.directory = plan.make() if writer else plan.directory or plan.experiment_dir / "<new run>"
        if writer and self.lock is None:
            self.lock = RunLock(self.directory)  # a new run: held against a resume that would start meanwhile
            self.lock.acquire()
        if plan.resumed:
            how = f"resumed from {plan.ckpt_path}"
        elif plan.parent is not None:
            how = f"new, from {plan.ckpt_path} ({plan.parent} is left as it is)"
        else:
            how = "new" if plan.create else "started"
        rank_zero_info(run_line(self.directory, how, seed))  # the command's first line
        self.record = RunRecord(self.directory, writer)
        if plan.parent is not None and self.origin is not None:
            self.record.data.setdefault("parent", _parent(plan.parent, plan.ckpt_path, self.origin))
        return plan.ckpt_path

    def check_resume(self, command: dict[str, Any], links: Iterable[str], model: pl.LightningModule) -> None:
        """Refuses a resume whose command asks for another model or data class than the run's (``resume_keys.py``),
        or whose model the checkpoint does not fit."""
        if self.plan is None or not self.plan.resumed or self.origin is None:
            return
        self._check_keys(command, links)
        check_checkpoint(str(self.plan.ckpt_path), model)

    def _check_keys(self, command: dict[str, Any], links: Iterable[str]) -> None:
        assert self.plan is not None
        assert self.origin is not None
        record = self.origin.get("provenance") or {}
        saved = yaml.safe_load(record["config"]) if isinstance(record.get("config"), str) else None
        if not isinstance(saved, dict):
            return  # not written by this kit's fit: nothing to compare with
        saved = current_names(saved)  # a run made before runkit names its classes `<package>.kit.X` (legacy.py)
        from .resume_keys import changed_keys  # a resume's only: a new run loads none of it

        changed = changed_keys("model", command.get("model"), saved.get("model"), links)
        data = [
            spec.get("class_path") if isinstance(spec, dict) else spec
            for spec in (command.get("data"), saved.get("data"))
        ]
        changed += changed_keys("data", {"class_path": data[0]}, {"class_path": data[1]}, ())
        if changed:
            raise ValueError(
                f"--ckpt_path {self.plan.ckpt_path} continues run {self.directory} with the model and data class its"
                f" checkpoint holds; this command asks for others: {'; '.join(changed)}. Drop them to continue the"
                f" run, or start a new run from the checkpoint: --ckpt_path {self.plan.ckpt_path} --run.name NEW"
            )

    def check_processes(self, trainer: pl.Trainer) -> None:
        """Refuses a ``fit`` from a checkpoint whose global batch this trainer's processes cannot share equally
        (``safety/elastic.py``)."""
        if self.layout is None or self.plan is None:
            return
        check_processes(self.layout, trainer.world_size, str(self.plan.ckpt_path))

    @property
    def checkpoint(self) -> str | None:
        """The checkpoint the command loads, ``best``/``last`` resolved to a file (``None``: none)."""
        return self.plan.ckpt_path if self.plan is not None else None

    def save_config(self, parser: ArgumentParser, config: Namespace) -> list[pl.Callback]:
        """Writes the run's ``config.yaml`` if this fit created the run; returns the callbacks that record it."""
        if self.record is None:
            return []
        path = self.directory / "config.yaml"
        if self.record.writer and not path.exists():
            # Written once, by the fit that creates the run, naming the run: `fit -c <run>/config.yaml
            # --ckpt_path last` resumes exactly this one. Other commands and resumes leave it as it is.
            config = config.clone()
            config["run"]["name"] = self.directory.name
            for key in FIT_ONLY:  # so that every subcommand (validate, export, lr_find, ...) reads this file
                config.pop(key, None)
            if isinstance(path, StorePath):  # jsonargparse writes local files only: one object, the config whole
                path.write_text(parser.dump(config, skip_none=False))
            else:
                parser.save(config, path, skip_none=False, overwrite=False)
        return [Provenance(self.record, path.read_text() if path.is_file() else "")]

    def tracks(self) -> bool:
        """Whether the command's trackers log (``trackers/placement.py`` places them where the run is).

        Only ``fit`` logs: evaluating a checkpoint writes no events into its run (their steps would restart at 0
        on the run's curves); the metrics are printed as a table. Objects built without a subcommand (``run=False``,
        for a ``fit`` called in code) log into the named run or the experiment folder.
        """
        return self.subcommand is None or self.record is not None

    def first_logged_step(self) -> int | None:
        """The first step this session's trackers log: after the resumed checkpoint's last one (``None``: new run).

        A resumed run continues its curves, with each step logged once."""
        if self.plan is None or not self.plan.resumed or self.origin is None:
            return None
        logged = ((self.origin.get("provenance") or {}).get("progress") or {}).get("logged_step")
        return None if logged is None else logged + 1

    def start(self, trainer: pl.Trainer, command: list[str], seed: object, ckpt_path: str | None) -> None:
        """Records this session's start in the run (``fit``)."""
        if self.record is not None:
            seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
            self.record.start_session(trainer, command, seed, ckpt_path)
            self.trainer, self.program = trainer, command[0]

    def end(self, error: BaseException | None) -> None:
        """Records how this session ended (``None``: it finished), and gives the run's lock back."""
        if self.record is not None and not self.folder_gone():
            self.record.end_session(error)
            if self.record.writer and self.trainer is not None and self.record.data["sessions"]:
                session = self.record.data["sessions"][-1]
                rank_zero_info(closing_block(self.program, self.directory, self.trainer, session))
        self.release()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """While the command runs: an error a writer thread (TensorBoard's) raises because the run folder was removed
        is left to the one line of ``exit_if_folder_gone``, not printed as a thread's traceback."""
        with threads_quiet(lambda args: issubclass(args.exc_type, OSError) and self.folder_gone()):
            yield

    def exit_if_folder_gone(self, subcommand: str) -> None:
        """Exits 1 with one ``error:`` line if the run folder was removed while the command ran: the error a write
        into it raised (TensorBoard's events, a checkpoint, provenance) would not say that."""
        if self.folder_gone():
            sys.stderr.write(
                f"error: {self.directory}: the run folder was deleted while {subcommand} ran; nothing more could be"
                " saved in it\n"
            )
            raise SystemExit(1)

    def folder_gone(self) -> bool:
        """Whether the run folder this command writes was removed while it ran (nothing more can be kept in it)."""
        return self.record is not None and self.record.writer and not self.record.directory.is_dir()

    def release(self) -> None:
        """Gives the run's lock back (a refused command writes nothing, a lock included)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def discard(self) -> None:
        """Gives the lock back, and removes the run folder this command created, with the experiment folder if it is
        left empty."""
        self.release()
        plan, record = self.plan, self.record
        if plan is None or not plan.create or record is None or not record.writer or not record.directory.is_dir():
            return
        remove_tree(record.directory)
        if not isinstance(record.directory, StorePath):  # a store's folders go with their last object
            with contextlib.suppress(OSError):
                os.removedirs(record.directory.parent)
        self.record = None


def _class_path(spec: object) -> object:
    return spec.get("class_path") if isinstance(spec, dict) else spec


def _parent(run: RunPath, ckpt_path: str | None, origin: dict[str, Any]) -> dict[str, Any]:
    """Where a run that started from another run's checkpoint came from (kept in its provenance)."""
    record = origin.get("provenance") or {}
    name = f"{record.get('experiment')}/{record.get('run')}" if record.get("run") else str(run)
    return {"run": name, "checkpoint": ckpt_path, "epoch": origin.get("epoch"), "step": origin.get("global_step")}


def is_global_zero_process() -> bool:
    """Whether this process will be global rank 0, known before any process group exists (from the launcher's
    environment: torchrun's ``RANK``, SLURM's ``SLURM_PROCID``, Lightning's ``LOCAL_RANK`` and ``NODE_RANK``)."""
    node = os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK") or "0"
    return rank_zero_only.rank == 0 and node == "0"
