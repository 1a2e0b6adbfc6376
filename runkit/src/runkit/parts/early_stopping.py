"""Early stopping on the run's monitored metric, with one line that says why training stopped."""

from __future__ import annotations

from typing import Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.utilities.rank_zero import rank_zero_info


class EarlyStoppingOnBest(LightningEarlyStopping):
    """Lightning's ``EarlyStopping``, by default on the metric and mode of ``best_checkpoint``.

    Following the checkpoint's metric keeps one place to say what "better" means, and ``checkpoints/best.ckpt``
    then holds the best weights when training stops. When it stops, one line names the metric, its best value
    and the patience; Lightning says so only with ``verbose``, together with a line for every improvement.
    """

    def __init__(
        self,
        monitor: str | None = None,
        mode: Literal["min", "max"] | None = None,
        patience: int = 3,
        min_delta: float = 0.0,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
    ) -> None:
        """Configures when training stops.

        Args:
            monitor: The logged metric to watch; ``null``: the one ``best_checkpoint`` ranks checkpoints by.
            mode: ``min`` if lower is better, ``max`` if higher is; ``null``: ``best_checkpoint``'s mode when
                ``monitor`` is ``null``, else ``min``.
            patience: Validations in a row without improvement before training stops.
            min_delta: Smallest change of the metric that counts as an improvement.
            stopping_threshold: Stop as soon as the metric is better than this value; ``null``: never.
            divergence_threshold: Stop as soon as the metric is worse than this value; ``null``: never.
        """
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        super().__init__(
            monitor=monitor or "",
            mode=mode or "min",
            patience=patience,
            min_delta=min_delta,
            stopping_threshold=stopping_threshold,
            divergence_threshold=divergence_threshold,
        )
        self._requested = (monitor, mode)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        monitor, mode = self._requested
        if monitor is None:
            checkpoint = _monitoring_checkpoint(trainer)
            if checkpoint is None:
                raise ValueError("EarlyStopping: monitor is null and no checkpoint callback monitors a metric: set it")
            self._watch(str(checkpoint.monitor), mode or checkpoint.mode)
        super().setup(trainer, pl_module, stage)

    def _watch(self, monitor: str, mode: str) -> None:
        """What Lightning's constructor derives from ``monitor`` and ``mode``, for the values known only now."""
        self.monitor, self.mode = monitor, mode
        self.min_delta = abs(self.min_delta) * (1 if mode == "max" else -1)
        self.best_score = torch.as_tensor(-torch.inf if mode == "max" else torch.inf)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.stopping_reason is EarlyStoppingReason.NOT_STOPPED:
            return
        if self.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED:
            reason = (
                f"{self.monitor} did not improve for {self.wait_count} validations (patience {self.patience});"
                f" best {self.monitor} {float(self.best_score):.6g}"
            )
        else:
            reason = str(self.stopping_reason_message)
        checkpoint = _monitoring_checkpoint(trainer)
        same = checkpoint is not None and checkpoint.monitor == self.monitor and checkpoint.best_model_path
        kept = f"; {checkpoint.best_model_path} holds it" if same else ""
        rank_zero_info(f"Early stopping after epoch {self.stopped_epoch}: {reason}{kept}")


def _monitoring_checkpoint(trainer: pl.Trainer) -> ModelCheckpoint | None:
    """The checkpoint callback that keeps the best value of a metric (``best_checkpoint``), if any."""
    found = [c for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor]  # type: ignore[attr-defined]
    return found[0] if found else None
