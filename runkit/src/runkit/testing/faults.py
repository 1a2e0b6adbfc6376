"""Faults that tests inject into runs: kills, signals and NaN inputs at a chosen optimizer step.

Named by class path on the command line (``--trainer.callbacks+=runkit.testing.faults.SignalAtStep``, or
``fault("SignalAtStep", step=5)``), so every process of a run imports them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from ..safety.background_save import BackgroundWriter


class SignalAtStep(Callback):
    """Sends ``signum`` to this process in the ``batch``-th batch (1-based) that starts at global step ``step``.

    ``hook="end"`` sends it when that batch ends, ``"start"`` before the batch runs. With gradient accumulation
    several batches share a step: with ``hook="end"``, batch 1 is the one whose optimizer step just happened.
    ``repeat`` sends it that many times in a row (a second Ctrl-C). ``pid``: another process to signal (a server).
    ``rank``: only the process of that global rank signals (``-1``: every one). ``settled``: the checkpoint save in
    flight (a background one) commits first, so the signal meets the checkpoint saved before it (a test of what a
    committed checkpoint resumes; test_background_save.py kills saves in flight).
    """

    def __init__(
        self,
        step: int,
        signum: int = int(signal.SIGKILL),
        batch: int = 1,
        hook: str = "end",
        repeat: int = 1,
        pid: int | None = None,
        rank: int = -1,
        settled: bool = False,
    ) -> None:
        self.step, self.signum, self.batch, self.hook, self.repeat = step, signum, batch, hook, repeat
        self.pid, self.rank, self.settled = pid, rank, settled
        self._seen = 0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if self.hook == "start":
            self._count(trainer)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if self.hook == "end":
            self._count(trainer)

    def _count(self, trainer: pl.Trainer) -> None:
        if trainer.global_step == self.step and self.rank in (-1, trainer.global_rank):
            self._seen += 1
            if self._seen == self.batch:
                if self.settled and isinstance(writer := trainer.strategy.checkpoint_io, BackgroundWriter):
                    writer.saves.wait()
                for _ in range(self.repeat):
                    os.kill(self.pid or os.getpid(), self.signum)


class SignalInValidation(Callback):
    """Sends ``signum`` to this process when batch ``batch`` of the validation in epoch ``epoch`` starts (never in
    the sanity check); with ``report``, writes how many evaluation batches ended from then on when the run stops.

    It serves ``validate``, ``test`` and ``predict`` too (``epoch`` 0): their batches are counted the same way.
    """

    def __init__(self, epoch: int = 0, batch: int = 0, signum: int = int(signal.SIGTERM), report: str = "") -> None:
        self.epoch, self.batch, self.signum, self.report = epoch, batch, signum, report
        self._sent, self._ended = False, 0

    def _start(self, trainer: pl.Trainer, batch_idx: int) -> None:
        if not trainer.sanity_checking and trainer.current_epoch == self.epoch and batch_idx == self.batch:
            self._sent = True
            os.kill(os.getpid(), self.signum)

    def _end(self) -> None:
        self._ended += self._sent

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._start(trainer, batch_idx)

    def on_test_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._start(trainer, batch_idx)

    def on_predict_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._start(trainer, batch_idx)

    def on_validation_batch_end(self, *args: object) -> None:
        self._end()

    def on_test_batch_end(self, *args: object) -> None:
        self._end()

    def on_predict_batch_end(self, *args: object) -> None:
        self._end()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self.report:
            with open(self.report, "w") as file:
                json.dump({"batches_after_signal": self._ended}, file)


class SignalFromOutside(Callback):
    """Has another process send ``signum`` to this run's main process (``target="main"``), to its whole process group
    (``"group"``), to every rank's process (``"ranks"``) or to the group of its parent (``"node"``: under torchrun,
    the node's agent and its processes), as ``kill`` or a cluster's scheduler does, at ``phase``:
    ``train`` (after the backward pass of the batch that starts at global step ``step``, before its optimizer step),
    ``validation`` (as batch 1 of the first validation starts, not the sanity check's) or ``checkpoint`` (while the
    first checkpoint is being saved).

    Global rank 0 sends (under DDP, the main process is rank 0). With ``report``, writes the time it sent and the
    process group. The sender runs in a session of its own: it is not part of the group it signals, as ``scancel``
    is not.
    """

    def __init__(self, phase: str, signum: int, target: str = "group", step: int = 5, report: str = "") -> None:
        self.phase, self.signum, self.target, self.step, self.report = phase, signum, target, step, report
        self._sent = False

    def _send(self, trainer: pl.Trainer) -> None:
        if self._sent or trainer.sanity_checking:
            return
        self._sent = True
        pids = [os.getpid()]
        if self.target == "ranks" and torch.distributed.is_initialized():
            pids = [None] * trainer.world_size  # every rank is in this hook now
            torch.distributed.all_gather_object(pids, os.getpid())
        if not trainer.is_global_zero:
            return
        groups = {"group": os.getpgid(0), "node": os.getpgid(os.getppid())}
        destinations = [f"-{groups[self.target]}"] if self.target in groups else [str(pid) for pid in pids]
        if self.report:
            with open(self.report, "w") as file:
                json.dump({"sent": time.time(), "pgid": os.getpgid(0), "pids": pids}, file)
        name = signal.Signals(self.signum).name.removeprefix("SIG")
        subprocess.run(["kill", "-s", name, "--", *destinations], check=True, start_new_session=True)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.phase == "train" and trainer.global_step == self.step:
            self._send(trainer)

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.phase == "validation" and batch_idx == 1:
            self._send(trainer)

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        if self.phase == "checkpoint":
            self._send(trainer)


class SignalAtEpochEnd(Callback):
    """Sends ``signum`` to this process as epoch ``epoch`` ends: after its validation, before its checkpoints."""

    def __init__(self, epoch: int, signum: int = int(signal.SIGTERM)) -> None:
        self.epoch, self.signum = epoch, signum

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), self.signum)


class SleepEachStep(Callback):
    """Sleeps ``seconds`` after every training batch: a run slow enough for another command to meet it running."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: object) -> None:
        time.sleep(self.seconds)


class NaNInputAtStep(Callback):
    """Puts a NaN into the first input of each batch that starts at global step ``step`` (on process ``rank`` only,
    if given)."""

    def __init__(self, step: int, rank: int = -1) -> None:
        self.step, self.rank = step, rank

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: tuple[Tensor, Tensor], batch_idx: int
    ) -> None:
        if trainer.global_step == self.step and self.rank in (-1, trainer.global_rank):
            batch[0].view(-1)[0] = float("nan")


class InfWeightAfterBackward(Callback):
    """Makes one weight infinite after the backward pass of the batch that starts at global step ``step``: the loss
    was finite, the optimizer step then leaves non-finite weights (as an update that overflows them does)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_step == self.step:
            next(pl_module.parameters()).data.view(-1)[0] = float("inf")


class RaiseAtStep(Callback):
    """Crashes the run with a ``RuntimeError`` right after optimizer step ``step``.

    With ``marker``, only once: the crash creates that file, and a rerun (from the saved config) that finds it
    trains on.
    """

    def __init__(self, step: int, marker: str | None = None) -> None:
        self.step, self.marker = step, marker

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step != self.step or (self.marker is not None and os.path.exists(self.marker)):
            return
        if self.marker is not None:
            open(self.marker, "x").close()
        raise RuntimeError(f"injected crash after step {self.step}")


def fault(name: str, **init_args: int | str | bool) -> str:
    """The flag that adds fault ``name`` to a run's callbacks."""
    return "--trainer.callbacks+=" + json.dumps({"class_path": f"{__name__}.{name}", "init_args": init_args})
