"""One trial: a normal ``fit`` of the search's config plus the trial's values, in the trial's own run directory.

The trial directory is ``<search directory>/trial-<number>/`` (config, checkpoints, TensorBoard events,
``fit.log`` with everything the run printed, and ``study.yaml`` naming the study that made it: no other study
ever uses it). A retried trial keeps its first number's directory and resumes
from its ``last.ckpt``, so a killed or preempted trial continues exactly where it stopped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl
import yaml

from ..bad_input import BadInputError
from ..command.cli import ProjectCLI, build_cli, discard_new_run, refusal
from ..project import Project
from .monitor import TrialMonitor

MARK = "study.yaml"
"""The file that says which study made a trial folder."""


class TrialRefusedError(Exception):
    """A trial's ``fit`` refused its config (exit 2): every trial would; the message is its ``error:`` line."""


class TrialCLI(ProjectCLI):
    """``ProjectCLI`` whose trainer also holds the trial's ``TrialMonitor``, and whose refusals reach the search."""

    def __init__(self, *args: Any, monitor: TrialMonitor, **kwargs: Any) -> None:
        self.monitor = monitor
        super().__init__(*args, **kwargs)

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        trainer = super().instantiate_trainer(**kwargs)
        if trainer.world_size > 1:
            # Lightning's DDP launcher would start `<package> search` again for every other process: each would
            # become a search worker of its own. Trials run side by side with `--workers` instead.
            self._refuse(
                BadInputError(
                    f"trainer: a search trial trains in one process, and this config trains in {trainer.world_size}"
                    f" ({trainer.num_nodes} node(s) x {trainer.num_devices} device(s)): set --trainer.devices 1"
                    " --trainer.num_nodes 1, and run trials side by side with --workers N"
                )
            )
        # First, so its epoch-end report and stop decision come before the checkpoints of that epoch.
        trainer.callbacks.insert(0, self.monitor)  # type: ignore[attr-defined]
        return trainer

    def _refuse(self, error: BaseException) -> NoReturn:
        # Not printed here: the trial's output goes to its fit.log; the worker prints it and the search exits 2.
        discard_new_run(self)
        raise TrialRefusedError(refusal(error))


def trial_dir(search_dir: Path, number: int) -> Path:
    """The run directory of trial ``number``."""
    return search_dir / f"trial-{number:03d}"


def claim(run_dir: Path, study_uid: str) -> None:
    """Makes ``run_dir`` as the study ``study_uid``'s trial folder, or checks it is that study's.

    A folder this study did not make (an earlier study's, whose journal is gone or lives in another storage) is
    never used: a retry would resume its ``last.ckpt`` with this study's values. Raises ``TrialRefusedError``.
    """
    mark = run_dir / MARK
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        owner = yaml.safe_load(mark.read_text()) if mark.is_file() else None
        if not isinstance(owner, dict) or owner.get("study") != study_uid:
            raise TrialRefusedError(
                f"{run_dir} was made by another study: move it away, or give this search another --run.name"
            ) from None
        return
    mark.write_text(f"# The search study whose trial this folder is (see kit/search/trial.py).\nstudy: {study_uid}\n")


def fit_trial(base_config: Path, flags: list[str], run_dir: Path, monitor: TrialMonitor, project: Project) -> None:
    """Runs ``fit -c base_config *flags`` into ``run_dir`` (from its ``last.ckpt`` if it has one: a retried
    trial), output to ``run_dir/fit.log``. ``claim`` made the folder."""
    args = [
        "fit",
        f"--config={base_config}",
        *flags,
        f"--trainer.default_root_dir={run_dir.parent.parent}",
        f"--run.experiment={run_dir.parent.name}",
        f"--run.name={run_dir.name}",
        # `last` starts the trial when there is nothing to resume (its folder holds fit.log already), else resumes.
        "--ckpt_path=last",
    ]
    log = run_dir / "fit.log"
    try:
        with output_to(log):
            print(" ".join(args), flush=True)
            build_cli(args, cli_class=partial(TrialCLI, monitor=monitor), project=project)
    except SystemExit as stopped:
        if stopped.code != 2:
            raise
        # Refused before it trained: its one `error:` line went to fit.log, where nobody reads it.
        lines = [line for line in log.read_text().splitlines() if line.startswith("error: ")] if log.is_file() else []
        raise TrialRefusedError(
            lines[-1].removeprefix("error: ") if lines else f"refused its config; see {log}"
        ) from None


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Sends this process's stdout and stderr (file descriptors 1 and 2, C libraries included) to ``path``.

    The console keeps one progress line per trial; each trial's own output stays with its run.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)
