"""Checkpoints in the run folder whatever the first logger is, and every logger flushed with each checkpoint."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import MLFlowLogger

from ..store import location


class TrackedRun(Callback):
    """Checkpoints in ``<run>/checkpoints`` whatever the first logger is; every logger flushed with each checkpoint.

    Lightning puts a ``ModelCheckpoint`` without ``dirpath`` under the first logger's name and version (an MLflow
    experiment and run id, a W&B project and id); and what a checkpoint resumes from must be on disk with it.
    """

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(location(trainer.default_root_dir) / "checkpoints")

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        for logger in trainer.loggers:
            logger.save()
            if isinstance(logger, MLFlowLogger) and hasattr(logger, "flush"):  # the kit's: its background sends, done
                logger.flush()
