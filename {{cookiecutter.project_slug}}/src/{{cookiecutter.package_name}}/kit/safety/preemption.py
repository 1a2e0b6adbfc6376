"""Stopping on a signal: SIGTERM (preemption) and Ctrl-C stop within one batch; only ``fit`` saves, and resumes exactly.

A cluster that reclaims a node sends SIGTERM (SLURM also sends its requeue signal, SIGUSR1 by default,
when the job was submitted with ``--signal``). Lightning 2.6 already catches both, but stops at any
batch, also between accumulated micro-batches whose gradients no checkpoint holds, finishes a whole
validation pass first when the signal comes during one inside ``fit``, saves nothing itself, and exits 0
(lightning#21623), which tells a scheduler that the job is done. Here:

- ``fit`` stops at the next optimizer-step boundary, or after the current batch of its validation, saves
  ``last.ckpt`` and exits 143. The requeued job runs the same command with ``--ckpt_path last`` and
  continues exactly where this one stopped: a validation that was cut short runs again from its start.
- ``validate``, ``test`` and ``predict`` stop after the current batch and exit 143; they write no checkpoint.
- Ctrl-C does the same with exit code 130 (Lightning exits 1 and saves nothing); a second Ctrl-C stops at once.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only

from .boundaries import StepBoundary
from .checkpoints import LastCheckpoint, checkpoint_dir

PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM  # 143: the shell's code for "terminated by SIGTERM"
INTERRUPTED_EXIT_CODE = 128 + signal.SIGINT  # 130: the shell's code for Ctrl-C
# The validation loop's progress as Lightning saves it when interrupted in the step of its first batch: resuming
# from it runs the whole validation again (lightning's RESTARTED_MID_EVALUATION).
_VALIDATION_NOT_DONE = {
    "total": {"ready": 1, "started": 1, "processed": 0, "completed": 0},
    "current": {"ready": 1, "started": 1, "processed": 0, "completed": 0},
    "is_last_batch": False,
}


class Interrupted(SystemExit):
    """Ctrl-C: the command stops now and exits 130."""

    def __init__(self) -> None:
        super().__init__(INTERRUPTED_EXIT_CODE)


@contextmanager
def ctrl_c_exits_130() -> Iterator[None]:
    """While the block runs, Ctrl-C raises ``Interrupted`` (exit 130), which Lightning passes on unchanged.

    Lightning catches ``KeyboardInterrupt`` and exits 1, the code of a failed run.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupt_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_now(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


class Preemption(StepBoundary):
    """Delivers SIGTERM, SLURM's requeue signal and Ctrl-C to Lightning only at optimizer-step boundaries (or
    after a validation batch), saves ``last.ckpt`` when ``fit`` stops on them, and sets the exit code (143, 130).

    Under SLURM with Lightning's auto-requeue, the requeue signal runs Lightning's handler (an
    ``hpc_ckpt_<n>.ckpt`` in the run directory and ``scontrol requeue``) at such a boundary too.
    """

    def __init__(self) -> None:
        self._handlers: dict[int, Any] = {}  # signal -> Lightning's handler, called once the step is complete
        self._pending: list[int] = []
        self._interrupted = False  # the stop came from Ctrl-C
        self._training = False  # this process has trained: there is a state worth saving
        # The RNG states where training left off before a validation: torch's at every step boundary (the
        # validation's DataLoader draws its seed from it before any hook runs; 2 us), Python's and NumPy's when
        # the validation starts (taking them at every step would cost ~0.1 ms).
        self._torch_rng: tuple[Any, Any] | None = None
        self._host_rng: tuple[Any, Any] | None = None
        self._validation_cut = False  # stopped inside fit's validation: the checkpoint says it has not run

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._training = True
        self._torch_rng = _torch_rng()
        # Lightning installs its handlers right before training; take them over, to call them later.
        # (Its teardown puts the handlers from before the run back, which also removes ours.)
        if threading.current_thread() is not threading.main_thread():
            return
        # SIGUSR1 has a handler only under SLURM with auto-requeue (its default requeue signal).
        for signum in (signal.SIGTERM, getattr(signal, "SIGUSR1", signal.SIGTERM), signal.SIGINT):
            handler = signal.getsignal(signum)
            if callable(handler):
                self._handlers[signum] = handler
                signal.signal(signum, self._defer)

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            # The next Ctrl-C stops at once (the handler from before the run, ``Interrupted`` under the CLI).
            signal.signal(signal.SIGINT, self._handlers[signal.SIGINT])
            if rank_zero_only.rank == 0:  # os.write: print and logging are not safe inside a signal handler
                os.write(2, b"\nCtrl-C: stopping after this step and saving last.ckpt; Ctrl-C again stops at once\n")
        if signum not in self._pending:
            self._pending.append(signum)

    def on_optimizer_step_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._torch_rng = _torch_rng()
        self._deliver()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._deliver()

    def _deliver(self) -> None:
        # Lightning's SIGTERM handler marks the trainer, which then raises SIGTERMException after this batch
        # (and tells the processes it started, under DDP). Ctrl-C takes the same way out.
        while self._pending:
            signum = self._pending.pop(0)
            rank_zero_info(f"Preemption: handling signal {signal.Signals(signum).name} at a step boundary")
            if signum == signal.SIGINT:
                self._interrupted = True
                signum = signal.SIGTERM
            if signum in self._handlers:
                self._handlers[signum](signum, None)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._host_rng = random.getstate(), np.random.get_state()

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self._training:
            self._deliver()
        _stop_if_signalled(trainer)

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        _stop_if_signalled(trainer)

    def on_predict_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        _stop_if_signalled(trainer)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException):
            return
        # SIGTERMException is a SystemExit without a code (exit status 0); Lightning re-raises this object.
        exception.code = INTERRUPTED_EXIT_CODE if self._interrupted else PREEMPTED_EXIT_CODE
        if trainer.state.fn != TrainerFn.FITTING or not self._training:
            rank_zero_info(f"Stopped by a signal; no checkpoint written; exiting with code {exception.code}")
            return
        self._validation_cut = trainer.validating
        if self._validation_cut:
            # The process ends here: put the RNGs back to where training left them, so that the checkpoint
            # (see ExactResume) replays the validation's own draws (e.g. its DataLoader's seed) on resume.
            self._restore_rng()
        last = next((cb for cb in trainer.callbacks if isinstance(cb, LastCheckpoint)), None)  # type: ignore[attr-defined]
        path = last.path if last is not None and last.path is not None else checkpoint_dir(trainer) / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)
        rank_zero_info(f"Preemption: saved {path}; exiting with code {exception.code}")

    def _restore_rng(self) -> None:
        if self._torch_rng is not None:
            cpu, cuda = self._torch_rng
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state(cuda)
        if self._host_rng is not None:
            random.setstate(self._host_rng[0])
            np.random.set_state(self._host_rng[1])

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._validation_cut:
            # The training state is complete, the validation is not: record it as not run yet, so that a resume
            # runs it from its first batch (Lightning would skip what is left of it, or continue with other batches).
            checkpoint["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"] = _VALIDATION_NOT_DONE


def _stop_if_signalled(trainer: pl.Trainer) -> None:
    # Lightning checks after each evaluation batch but the last, and never in `predict`.
    if trainer.received_sigterm:
        raise SIGTERMException()


def _torch_rng() -> tuple[Any, Any]:
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda
