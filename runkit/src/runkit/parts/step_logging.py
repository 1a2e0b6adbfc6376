"""Step metrics logged only where a logger writes them: ``self.log`` costs ~0.1 ms a call, every step.

Lightning's ``self.log`` checks its arguments, copies the value and gathers it into its results on each call (a
profile of the default run puts ~4 % of a step there), while the loggers write step values only every
``log_every_n_steps`` steps (50 by default): 49 calls of 50 feed nothing. A module asks ``logging_step`` first::

    def training_step(self, batch, batch_idx):
        loss = ...
        if logging_step(self):
            self.log("train/loss_step", loss)
        return loss

Epoch values are better kept in torchmetrics objects (``update`` every step, cheap) and logged once, at epoch end.
"""

from __future__ import annotations

import lightning.pytorch as pl

from ..lightning_internals import logger_writes_now


def logging_step(module: pl.LightningModule) -> bool:
    """Whether what ``module`` logs for this step reaches a logger (always outside a Trainer's run)."""
    trainer = module._trainer
    return trainer is None or logger_writes_now(trainer)
