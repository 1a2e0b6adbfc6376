"""Preemption: on SIGTERM, save the newest state at the next optimizer step and exit 143, so a scheduler requeues.

A cluster that reclaims a node sends SIGTERM (SLURM also sends its requeue signal, SIGUSR1 by default,
when the job was submitted with ``--signal``). Lightning 2.6 already catches both, but stops at any
batch, also between accumulated micro-batches whose gradients no checkpoint holds, saves nothing
itself, and exits 0 (lightning#21623), which tells a scheduler that the job is done. The requeued job
runs the same command with ``--ckpt_path last`` and continues exactly where this one stopped.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from .boundaries import StepBoundary
from .checkpoints import LastCheckpoint, checkpoint_dir

PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM  # 143: the shell's code for "terminated by SIGTERM"


class Preemption(StepBoundary):
    """Delivers SIGTERM and SLURM's requeue signal to Lightning only at optimizer-step boundaries, saves
    ``last.ckpt`` when Lightning stops on them, and makes the process exit 143 instead of 0.

    Under SLURM with Lightning's auto-requeue, the requeue signal runs Lightning's handler (an
    ``hpc_ckpt_<n>.ckpt`` in ``trainer.default_root_dir`` and ``scontrol requeue``) at a step boundary too.
    """

    def __init__(self) -> None:
        self._handlers: dict[int, Any] = {}  # signal -> Lightning's handler, called once the step is complete
        self._pending: list[int] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning installs its handlers right before training; take them over, to call them later.
        # (Its teardown puts the handlers from before the run back, which also removes ours.)
        if threading.current_thread() is not threading.main_thread():
            return
        # SIGUSR1 has a handler only under SLURM with auto-requeue (its default requeue signal).
        for signum in (signal.SIGTERM, getattr(signal, "SIGUSR1", signal.SIGTERM)):  # no SIGUSR1 on Windows
            handler = signal.getsignal(signum)
            if callable(handler):
                self._handlers[signum] = handler
                signal.signal(signum, self._defer)

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        if signum not in self._pending:
            self._pending.append(signum)

    def on_optimizer_step_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._deliver()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._deliver()

    def _deliver(self) -> None:
        # Lightning's SIGTERM handler marks the trainer, which then raises SIGTERMException after this batch.
        while self._pending:
            signum = self._pending.pop(0)
            rank_zero_info(f"Preemption: handling signal {signal.Signals(signum).name} at a step boundary")
            self._handlers[signum](signum, None)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        last = next((cb for cb in trainer.callbacks if isinstance(cb, LastCheckpoint)), None)  # type: ignore[attr-defined]
        path = last.path if last is not None and last.path is not None else checkpoint_dir(trainer) / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)
        rank_zero_info(f"Preemption: saved {path}; exiting with code {PREEMPTED_EXIT_CODE}")
        # SIGTERMException is a SystemExit without a code (exit status 0); Lightning re-raises this object.
        exception.code = PREEMPTED_EXIT_CODE
