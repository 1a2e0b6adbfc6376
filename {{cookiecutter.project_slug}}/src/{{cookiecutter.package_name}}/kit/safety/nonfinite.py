"""Fail fast on a non-finite loss: stop at the step it appears, before it reaches the weights.

Lightning trains on through a NaN loss (the NaN reaches the weights at the next optimizer step, and
every later checkpoint); ``EarlyStopping(check_finite=True)`` looks only at logged metrics, after the
optimizer step. The first thing to try when it fires: full precision (``--trainer.precision 32-true``).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor


class NonFiniteLossError(FloatingPointError):
    """A training loss was NaN or infinite; the message says at which step and batch."""


class StopOnNonFiniteLoss(Callback):
    """Raises ``NonFiniteLossError`` before the backward pass of a NaN or infinite training loss.

    The weights, the optimizer state and every checkpoint keep the last finite state.
    """

    def __init__(self) -> None:
        self._batch_idx = 0

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self._batch_idx = batch_idx

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        # One read of a scalar on the host per batch. torchmetrics' MeanMetric already reads the loss on the
        # host in `training_step` (its NaN check), so by now the device has no queued work to wait for.
        if bool(torch.isfinite(loss)):
            return
        raise NonFiniteLossError(
            f"training loss is {loss.item()} at global step {trainer.global_step} (epoch {trainer.current_epoch},"
            f" batch {self._batch_idx}); stopped before its backward pass, so the weights and checkpoints/last.ckpt"
            " hold the last finite state. First check: --trainer.precision 32-true"
        )
