"""One line per epoch when no progress bar is shown (CI, pipes, log files): a run that says what it does.

Lightning without its bar prints nothing between the model summary and the final table, for hours.
"""

from __future__ import annotations

import time

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_info

TRAIN_LOSS = "train/loss"  # the training loss as the task logs it (`train/loss_epoch` when logged per epoch too)


class EpochLine(Callback):
    """Prints ``epoch 2/10  step 640  train/loss 0.0123  val/loss 0.0150 (best)  12.3 s`` after each epoch.

    Quiet while a progress bar shows the same. The validation metric is the one ``best_checkpoint`` monitors.
    """

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()  # a resumed epoch has no epoch start

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.progress_bar_callback is not None:
            return
        # Every process reads them, though one prints: the read computes the epoch's values, a collective under DDP
        # (a metric logged with sync_dist, a torchmetrics object), which all processes must enter in the same order.
        metrics = trainer.callback_metrics
        if not trainer.is_global_zero:
            return
        epochs = f"/{trainer.max_epochs}" if trainer.max_epochs and trainer.max_epochs > 0 else ""
        parts = [f"epoch {trainer.current_epoch + 1}{epochs}", f"step {trainer.global_step}"]
        for key in (f"{TRAIN_LOSS}_epoch", TRAIN_LOSS):
            if key in metrics:
                parts.append(f"{TRAIN_LOSS} {float(metrics[key]):.4g}")
                break
        monitor = next(
            (cb for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint) and cb.monitor), None
        )
        if monitor is not None and monitor.monitor in metrics:
            value, previous = float(metrics[monitor.monitor]), monitor.best_model_score
            # The checkpoint callback may rank this epoch after this hook: compare with the best so far.
            best = previous is None or (value <= previous if monitor.mode == "min" else value >= previous)
            parts.append(f"{monitor.monitor} {value:.4g}{' (best)' if best else ''}")
        parts.append(f"{time.perf_counter() - self._start:.1f} s")
        rank_zero_info("  ".join(parts))
