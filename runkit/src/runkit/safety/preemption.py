"""Stopping on a signal where the state is whole: ``fit`` saves ``last.ckpt`` and resumes exactly; all ranks agree.

``signals.StopSignals`` records SIGTERM, SIGUSR1, SIGHUP or Ctrl-C whenever it arrives, on whichever processes it
reaches (one rank, every rank, the whole process group). ``Preemption`` acts on it at safe points, where every
process of a DDP run meets (one all-reduce of the pending signal, so all ranks stop at the same step):

- ``fit``: after the optimizer step in progress (never between accumulated micro-batches, whose gradients no
  checkpoint holds; after the current batch for a module whose steps Lightning does not count:
  ``outside_steps.py``), after the current batch of its validation, at the end of an epoch, as the next epoch starts
  (before its loader workers: for a signal that came while the epoch end's checkpoints were saved), or, for a signal
  that came while the run was setting up (its sanity check included), as training starts. It then saves
  ``last.ckpt`` (all ranks take part, rank 0 writes) and exits ``128 + signal``: 143 SIGTERM, 138 SIGUSR1, 129
  SIGHUP, 130 Ctrl-C. The same command with ``--ckpt_path last`` continues exactly where it stopped; a validation
  that was cut short runs again from its start. Under SLURM with auto-requeue, the requeue signal also requeues the job.
- ``validate``, ``test`` and ``predict`` stop after the current batch, with the same codes, and write nothing.

Lightning 2.6 on its own stops anywhere, between micro-batches too, finishes a whole validation pass first, saves
nothing, exits 0 (lightning#21623), and under DDP broadcasts from inside its signal handler, which hangs the ranks.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn

from ..lightning_internals import (
    cluster_environment,
    mark_epoch_not_started,
    mark_validation_not_done,
    request_stop,
    take_over_signals,
)
from .boundaries import StepBoundary
from .checkpoints import LastCheckpoint, checkpoint_dir
from .outside_steps import OutsideSteps
from .signals import STOP, Interrupted, exit_code


class Preemption(StepBoundary):
    """Acts on the stop signal ``signals.STOP`` recorded, at the safe points of every loop (see the module)."""

    def __init__(self, outside: OutsideSteps | None = None) -> None:
        self._outside = outside  # finds a module that steps where Lightning does not count: its batch ends are safe
        self._signum: int | None = None  # the stop signal this run acts on, once every rank agreed
        self._training = False  # this process has reached training: there is a state worth saving
        # The RNG states where training left off before a validation: torch's at every step boundary (the
        # validation's DataLoader draws its seed from it before any hook runs; 2 us), Python's and NumPy's when
        # the validation starts (taking them at every step would cost ~0.1 ms).
        self._torch_rng: tuple[Any, Any] | None = None
        self._host_rng: tuple[Any, Any] | None = None
        self._validation_cut = False  # stopped inside fit's validation: the checkpoint says it has not run
        self._before_epoch = False  # stopped as an epoch started: the checkpoint says it has not begun

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        take_over_signals(trainer)
        self._signum, self._training, self._validation_cut, self._before_epoch = None, False, False, False

    def _agree(self, trainer: pl.Trainer) -> int | None:
        """The stop signal every process acts on now, or ``None``: the highest one pending on any rank."""
        if self._signum is not None:
            return self._signum  # agreed already (at the same point on every rank)
        pending = STOP.pending or 0
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            flag = torch.full((1,), pending, device=trainer.strategy.root_device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            pending = int(flag.item())
        if not pending:
            return None
        STOP.consume()
        self._signum = pending
        request_stop(trainer)  # Lightning's loops raise SIGTERMException once the batch's bookkeeping is done
        rank_zero_info(f"{signal.Signals(pending).name}: stopping here ({_where(trainer)})")
        return pending

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._training = True
        self._torch_rng = _torch_rng()
        if self._agree(trainer):  # a signal came while the run set up: save the state training starts from
            raise SIGTERMException()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A signal that came while the epoch end's checkpoints were saved (they run after this callback's epoch end):
        # stop before the next epoch starts its loader workers (seconds each under load), as Lightning resumes it.
        if self._agree(trainer):
            self._before_epoch = True
            raise SIGTERMException()

    def on_optimizer_step_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._torch_rng = _torch_rng()
        self._agree(trainer)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self._outside is not None and self._outside.found:
            self._agree(trainer)  # no step Lightning counts will come: the batch's own steps are done

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._agree(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._host_rng = random.getstate(), np.random.get_state()

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.sanity_checking:
            return  # nothing trained yet: acted on as training starts
        if self._agree(trainer) and not self._training:
            raise SIGTERMException()  # `validate`: Lightning would go on after the last batch

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self._agree(trainer):
            raise SIGTERMException()

    def on_predict_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self._agree(trainer):
            raise SIGTERMException()  # Lightning's predict loop never checks

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, Interrupted) and trainer.strategy.launcher is not None:
            trainer.strategy.launcher.kill(signal.SIGKILL)  # a second Ctrl-C: the processes this one started too
        if not isinstance(exception, SIGTERMException):
            return
        # SIGTERMException is a SystemExit without a code (exit status 0); Lightning re-raises this object.
        exception.code = exit_code(self._signum or signal.SIGTERM)
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
        if trainer.is_global_zero and self._signum is not None:
            _requeue_under_slurm(trainer, self._signum)

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
            mark_validation_not_done(checkpoint)
        if self._before_epoch:
            mark_epoch_not_started(checkpoint)  # Lightning would resume it with the last epoch's batches, all done


def _where(trainer: pl.Trainer) -> str:
    if trainer.validating or trainer.testing or trainer.predicting:
        return "after the current batch"
    return f"global step {trainer.global_step}, epoch {trainer.current_epoch}"


def _requeue_under_slurm(trainer: pl.Trainer, signum: int) -> None:
    """``scontrol requeue`` the job when its requeue signal stopped a SLURM run with auto-requeue (Lightning's rule)."""
    environment = cluster_environment(trainer)
    if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
        return
    if signum != (environment.requeue_signal or signal.SIGUSR1):
        return
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else os.environ.get("SLURM_JOB_ID", "")
    if not re.fullmatch(r"[0-9_]+", job):
        rank_zero_warn(f"SLURM requeue: no valid job id ({job!r}); the job is not requeued")
        return
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        rank_zero_warn(f"SLURM requeue of job {job} failed: {error}")
        return
    if done.returncode == 0:
        rank_zero_info(f"SLURM: requeued job {job}; it continues with --ckpt_path last")
    else:
        rank_zero_warn(f"SLURM requeue of job {job} failed ({done.returncode}): {done.stderr.strip()}")


def _torch_rng() -> tuple[Any, Any]:
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda
