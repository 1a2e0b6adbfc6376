"""Provenance: where a run came from and how each of its sessions ended, in ``provenance.yaml`` and in every checkpoint.

A run has one session per process that trained it: the ``fit`` that created it, then each resume. A session
records its command line, seed, git commit (with a dirty flag; the diff of tracked files is saved next to it as
``git-<session>.diff``), the versions of Python, torch, CUDA, lightning, torchmetrics and jsonargparse, the host
and devices, its start and end time and how it ended (``STATUSES``). A session with no end was killed
(SIGKILL, out of memory, power), unless its process is still running. The run's ``progress`` (epoch, step, best
monitored metric) follows ``last.ckpt``: it is written once the checkpoint that holds it is in place, from that
checkpoint's own copy, so a save in the background (``safety/background_save.py``) commits what it wrote and no
more. ``checkpoints`` keeps the digest of each checkpoint file, in the order ``safety/digests.py`` describes. This
module is the only writer of ``provenance.yaml``; a lock orders the writes of the loop and of a background save.

Checkpoints carry the same record plus the resolved config, as strings, lists and numbers, so they still load
with ``torch.load(..., weights_only=True)`` and a checkpoint found on its own still says where it came from.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import yaml
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from ..bad_input import SetupPhase
from ..credentials import masked
from ..lightning_internals import epochs_completed
from ..project import current
from ..safety.checkpoint_io import AtomicCheckpointIO, fsync_directory
from ..safety.checkpoints import LAST
from ..safety.digests import ALGORITHM, KEY, Written, record_key
from ..safety.nonfinite import NonFiniteError
from ..safety.resume import ExactResume
from ..safety.signals import STOPS, signal_of
from ..store import RunPath, StorePath
from .facts import devices, git_state, now, versions
from .records import FILE, read_record, record_problem


def status_of(error: BaseException | None) -> tuple[str, str | None]:
    """The session status for how a command ended (``None``: normally) and the error line, if any."""
    if error is None:
        return "finished", None
    code = error.code if isinstance(error, SystemExit) else None
    if (signum := signal_of(code)) is not None:
        return STOPS[signum], None
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", None
    if isinstance(error, NonFiniteError):
        return "nonfinite", str(error).splitlines()[0]
    if isinstance(error, SystemExit) and code in (0, None):
        return "finished", None
    lines = str(error).strip().splitlines()
    return "failed", f"{type(error).__name__}: {lines[0] if lines else code}"


class RunRecord:
    """The provenance of one run, kept in ``<run>/provenance.yaml``; only the process of global rank 0 writes it."""

    def __init__(self, directory: RunPath, writer: bool) -> None:
        self.directory, self.writer = directory, writer
        self._diff = ""  # this session's diff of tracked files (checkpoints carry it inline)
        self._lock = threading.RLock()  # the loop and a background checkpoint save both write the record
        self.on_end: list[Callable[[str], None]] = []  # told the status once it is written (trackers/placement.py)
        if (problem := record_problem(directory)) is not None:  # never written over: it is the run's history
            raise ValueError(
                f"{directory / FILE}: not a provenance record ({problem}): repair it, or move the run away"
            )
        self.data: dict[str, Any] = read_record(directory) or {
            "experiment": directory.parent.name,
            "run": directory.name,
            "config": "config.yaml",
            "progress": {},
            "sessions": [],
        }

    def start_session(self, trainer: pl.Trainer, command: list[str], seed: int | None, ckpt_path: str | None) -> None:
        """Appends this process's session (status open until ``end_session``) and writes the record."""
        if not self.writer:
            return
        number = len(self.data["sessions"]) + 1
        git = git_state(current().source)  # the repository of the code that runs
        if git is not None:
            diff = git.pop("diff")
            git["diff"] = f"git-{number}.diff" if diff else None
            if diff:
                (self.directory / git["diff"]).write_text(diff)
            self._diff = diff
        session = {
            "started": now(),
            "ended": None,
            "status": None,
            "command": masked(shlex.join(command)),  # no URL's password
            "seed": seed,
            "resumed_from": ckpt_path,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "devices": devices(trainer),
            "git": git,
            "versions": versions(),
        }
        with self._lock:
            self.data["sessions"].append(session)
            self.write()

    def end_session(self, error: BaseException | None) -> None:
        """Records how this process's session ended (once: a second call changes nothing)."""
        if not self.writer or not self.data["sessions"] or self.data["sessions"][-1].get("ended"):
            return
        status, message = status_of(error)
        with self._lock:
            session = self.data["sessions"][-1]
            session.update(ended=now(), status=status)
            if (signum := signal_of(getattr(error, "code", None))) is not None:
                session["signal"] = signal.Signals(signum).name
            if message:
                session["error"] = masked(message)
            self.write()
        for listener in self.on_end:
            listener(status)

    def note_data(self, facts: dict[str, Any]) -> None:
        """Records how this session's train data is laid out over its processes (``safety/elastic.py``)."""
        if self.writer and self.data["sessions"]:
            with self._lock:
                self.data["sessions"][-1]["data"] = facts
                self.write()

    def progress(self, trainer: pl.Trainer, logged_step: int | None) -> dict[str, Any]:
        """Epoch, step and best monitored value so far: what a checkpoint made now holds (``for_checkpoint``)."""
        # Epochs whose training is complete (the loop counts one as processed before its end-of-epoch checkpoint).
        progress: dict[str, Any] = {"epochs": epochs_completed(trainer), "step": trainer.global_step}
        if logged_step is not None:
            progress["logged_step"] = logged_step  # the last step the trackers have: a resume starts after it
        best = next((cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.monitor), None)
        if best is not None and best.best_model_score is not None:
            progress["best"] = {"monitor": best.monitor, "value": float(best.best_model_score)}
        return progress

    def commit_progress(self, progress: dict[str, Any]) -> None:
        """Writes ``progress``, that of the ``last.ckpt`` now in place: the record never claims more than it holds."""
        with self._lock:
            self.data["progress"] = progress
            self.write()

    def checkpoint_writing(self, path: RunPath, written: Written, checkpoint: dict[str, Any]) -> None:
        """Records ``written`` as ``path``'s pending digest, durably, before the new file replaces the old one (step 2
        of ``safety/digests.py``'s order); a file outside the run folder has no entry. Called by the kit's checkpoint
        writer (``AtomicCheckpointIO.writing``) with the checkpoint it writes."""
        key = record_key(path, self.directory)
        if key is None or not self.writer:
            return
        with self._lock:
            entries = self.data.setdefault(KEY, {})
            entry = entries.get(key) if isinstance(entries.get(key), dict) else {}
            pending = {ALGORITHM: written.sha256, "size": written.size, "step": checkpoint.get("global_step")}
            entries[key] = {**entry, "pending": pending}
            self.write(durable=True)

    def checkpoint_saved(self, path: RunPath, checkpoint: dict[str, Any]) -> None:
        """Makes ``path``'s pending digest its entry, once the file is in place (step 4); for ``last.ckpt``, commits
        the progress that checkpoint holds (``AtomicCheckpointIO.saved``)."""
        key = record_key(path, self.directory)
        provenance = checkpoint.get("provenance")
        with self._lock:
            entries = self.data.get(KEY) or {}
            entry = entries.get(key) if key is not None else None
            if isinstance(entry, dict) and isinstance(entry.get("pending"), dict):
                entries[key] = entry["pending"]
            if path.name == f"{LAST}.ckpt" and isinstance(provenance, dict) and "progress" in provenance:
                self.data["progress"] = provenance["progress"]
            self.write()

    def for_checkpoint(self, config: str, progress: dict[str, Any]) -> dict[str, Any]:
        """The record as a checkpoint carries it: with the resolved config, this session's diff inline and the
        ``progress`` the checkpoint holds."""
        with self._lock:
            record = {**self.data, "config": config, "sessions": [dict(session) for session in self.data["sessions"]]}
        record.pop(KEY, None)  # of files on disk, not of this one
        record["progress"] = progress
        if record["sessions"] and self._diff:
            record["sessions"][-1]["git"] = {**record["sessions"][-1]["git"], "diff": self._diff}
        return record

    def tracker(self, name: str) -> dict[str, Any]:
        """What the record keeps of tracker ``name`` (its ids, under ``trackers``; ``{}``: none yet)."""
        return dict((self.data.get("trackers") or {}).get(name) or {})

    def keep_tracker(self, name: str, ids: dict[str, Any]) -> None:
        """Keeps tracker ``name``'s ids (written with the session's start): a resume continues the same tracked run."""
        self.data.setdefault("trackers", {})[name] = ids

    def tracker_lost(self, name: str, message: str) -> None:
        """Records at once that tracker ``name`` failed mid-run, and why (training goes on without it)."""
        with self._lock:
            self.data.setdefault("trackers", {}).setdefault(name, {})["lost"] = message
            self.write()

    def write(self, durable: bool = False) -> None:
        """Writes ``provenance.yaml`` whole (the only code that does; rank 0 only); ``durable``: fsynced, its rename
        too, before it returns (a store's write is durable once it returns)."""
        if not self.writer:
            return
        with self._lock:
            text = yaml.safe_dump(self.data, sort_keys=False, allow_unicode=True)
            if isinstance(self.directory, StorePath):  # one write: the object appears whole (store.py)
                (self.directory / FILE).write_text(text)
                return
            partial = self.directory / f".{FILE}.{os.getpid()}.tmp"
            with open(partial, "w") as file:
                file.write(text)
                if durable:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(partial, self.directory / FILE)  # readers never see half a file
            if durable:
                fsync_directory(self.directory)


class Provenance(Callback):
    """Puts the run's provenance into every checkpoint (``checkpoint["provenance"]``) and updates its progress.

    The progress goes into ``provenance.yaml`` only once ``last.ckpt`` holding it is on disk (the kit's checkpoint
    writer says when): a run killed while saving never has a record ahead of its ``last.ckpt``. With another
    checkpoint plugin it is written as the checkpoint is made. A session that the command refuses once it has
    started (bad input found by the first validation) is recorded as failed here, where the error passes.
    """

    def __init__(self, record: RunRecord, config: str) -> None:
        self.record, self.config = record, config
        self._writer: AtomicCheckpointIO | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        writer = trainer.strategy.checkpoint_io
        if isinstance(writer, AtomicCheckpointIO) and self.record.writer:  # global rank 0 writes checkpoints
            self._writer = writer
            writer.writing.append(self.record.checkpoint_writing)
            writer.saved.append(self.record.checkpoint_saved)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._writer is not None:
            self._writer.saves.wait()  # a save in flight still records its digest and progress
            self._writer.writing.remove(self.record.checkpoint_writing)
            self._writer.saved.remove(self.record.checkpoint_saved)
        self._writer = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        exact = next((cb for cb in trainer.callbacks if isinstance(cb, ExactResume)), None)  # type: ignore[attr-defined]
        if exact is not None and exact.facts is not None:
            self.record.note_data(exact.facts)

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        logged = max((getattr(logger, "logged_step", -1) for logger in trainer.loggers), default=-1)  # any tracker's
        progress = self.record.progress(trainer, logged if isinstance(logged, int) and logged >= 0 else None)
        checkpoint["provenance"] = self.record.for_checkpoint(self.config, progress)
        if self._writer is None and self.record.writer:  # another checkpoint plugin: nothing says when it is written
            self.record.commit_progress(progress)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # The command line ends a refused command with one line and exit 2 without recording the session's end.
        setup = next((cb for cb in trainer.callbacks if isinstance(cb, SetupPhase)), None)  # type: ignore[attr-defined]
        if setup is not None and isinstance(exception, Exception) and setup.refuses(exception):
            self.record.end_session(exception)


def describe_origin(checkpoint: dict[str, Any], path: str) -> str:
    """One line: where a checkpoint came from (its run, step, first session's start, commit and command)."""
    record = checkpoint.get("provenance")
    where = f"epoch {checkpoint.get('epoch')}, step {checkpoint.get('global_step')}"
    if not isinstance(record, dict) or not record.get("sessions"):
        return f"Checkpoint {path}: {where}; no provenance recorded (not written by this project's fit)"
    first, last = record["sessions"][0], record["sessions"][-1]
    git = last.get("git") or {}
    commit = f"commit {git['commit'][:10]}{' (dirty)' if git.get('dirty') else ''}" if git else "no git"
    run = f"{record.get('experiment')}/{record.get('run')}"
    return (
        f"Checkpoint {path}: {where} of run {run}, started {first.get('started')}, {commit}, by `{last.get('command')}`"
    )
