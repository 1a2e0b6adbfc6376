"""Optimizer-step boundaries: the only points where the training state is whole.

Between accumulated micro-batches, gradients gathered so far live in no checkpoint, so saving or
stopping there would lose them on resume. Lightning has no hook for "after the optimizer step".
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback


class StepBoundary(Callback):
    """A callback whose ``on_optimizer_step_end`` runs after each batch that completed an optimizer step."""

    _step_before = 0  # the global step when the current batch started

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        self._step_before = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if trainer.global_step != self._step_before:
            self.on_optimizer_step_end(trainer, pl_module)

    def on_optimizer_step_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Called once the batch that completed an optimizer step has ended."""
