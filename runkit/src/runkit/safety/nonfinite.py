"""Fail fast on non-finite numbers: stop at the step they appear, and never let one into a checkpoint.

Lightning trains on through a NaN loss (the NaN reaches the weights at the next optimizer step, and every later
checkpoint); ``EarlyStopping(check_finite=True)`` looks only at logged metrics, after the fact. A finite loss can
still overflow the weights (a learning rate far too high: the loss 2e28, an update of 1e34): the weights are
checked after every optimizer step, with one fused norm over the parameters. The checkpoint writer refuses
non-finite tensors too (``checkpoint_io.py``), and evaluating or exporting such a checkpoint is refused
(``checkpoints.check_checkpoint``). The first things to try: a lower learning rate, gradient clipping
(``--trainer.gradient_clip_val 1.0``), full precision (``--trainer.precision 32-true``).
"""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor

from .background_save import BackgroundWriter
from .boundaries import StepBoundary
from .checkpoints import checkpoint_dir
from .finite import listed, nonfinite_names

ADVICE = "First checks: a lower learning rate, --trainer.gradient_clip_val 1.0, --trainer.precision 32-true"


class NonFiniteError(FloatingPointError):
    """Training produced NaN or Inf; the message says where and which checkpoint holds the last finite state."""


class NonFiniteLossError(NonFiniteError):
    """A training loss was NaN or infinite."""


class NonFiniteWeightsError(NonFiniteError):
    """An optimizer step left NaN or Inf in the weights."""


class NonFiniteCheckpointError(NonFiniteError):
    """A checkpoint about to be written holds NaN or Inf: it was not written."""


class StopOnNonFinite(StepBoundary):
    """Raises ``NonFiniteLossError`` before the backward pass of a NaN or infinite training loss, and
    ``NonFiniteWeightsError`` right after an optimizer step that made a weight non-finite.

    Either way nothing non-finite is saved. Under DDP a loss is one process's own: stopping that process alone
    would leave the others waiting for its gradients, so the loss is only noted there, and the weights check (the
    same all-reduced weights on every process) stops every process at the same step.
    """

    def __init__(self) -> None:
        self._batch_idx = 0
        self._loss_note = ""  # under DDP: this process's non-finite loss, for the weights' message

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        self._batch_idx = batch_idx

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        # One read of a scalar on the host per batch. torchmetrics' MeanMetric already reads the loss on the
        # host in `training_step` (its NaN check), so by now the device has no queued work to wait for.
        if bool(torch.isfinite(loss)):
            return
        where = f"at global step {trainer.global_step} (epoch {trainer.current_epoch}, batch {self._batch_idx})"
        if trainer.world_size > 1:
            self._loss_note = f"; the training loss of process {trainer.global_rank} was {loss.item()} {where}"
            return
        raise NonFiniteLossError(
            f"training loss is {loss.item()} {where}; stopped before its backward pass: the weights are still"
            f" finite, and {last_finite_state(trainer)}. {ADVICE}"
        )

    def on_optimizer_step_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        parameters = [p for p in pl_module.parameters() if p.is_floating_point()]
        bad = bool(parameters) and not bool(torch.isfinite(torch.nn.utils.get_total_norm(parameters)))
        if bad:
            bad = bool(nonfinite_names(pl_module.named_parameters()))  # or only the norm overflowed: huge, finite
        if trainer.world_size > 1 and not isinstance(trainer.strategy, DDPStrategy):
            bad = trainer.strategy.reduce_boolean_decision(bad, all=False)  # sharded: each process checks its part
        if not bad:
            return
        names = nonfinite_names(pl_module.named_parameters())
        raise NonFiniteWeightsError(
            f"weights are non-finite after optimizer step {trainer.global_step} (epoch {trainer.current_epoch}):"
            f" {listed(names)}{self._loss_note}; stopped before anything saved them, and"
            f" {last_finite_state(trainer)}. {ADVICE}"
        )


def last_finite_state(trainer: pl.Trainer) -> str:
    """Which checkpoint of the run holds the last finite state: every checkpoint written was checked (finite)."""
    if isinstance(writer := trainer.strategy.checkpoint_io, BackgroundWriter):
        writer.saves.wait()  # a save in the background commits first: it is the last state
    folder = checkpoint_dir(trainer)
    steps = {}
    for name in ("last.ckpt", "best.ckpt"):
        path = folder / name
        if path.is_file():
            try:
                steps[path] = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("global_step")
            except Exception:  # unreadable: not one to name
                continue
    if not steps:
        return "no checkpoint was saved yet"
    path, step = max(steps.items(), key=lambda item: item[1] if isinstance(item[1], int) else -math.inf)
    return f"{_shown(path)} (step {step}) holds the last saved state, finite"


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
