"""Exact resume for monitored schedules (ReduceLROnPlateau): the epoch step Lightning skips after a restart.

Lightning 2.6 does not step ``ReduceLROnPlateau`` (or any scheduler configured with ``reduce_on_plateau``) at the
end of the epoch a run resumed into (the guard from lightning#14702: the metric it monitors is not in the
checkpoint). A run stopped mid-epoch and resumed then keeps a learning rate the uninterrupted run had reduced, and
ends elsewhere. ``PlateauResume`` takes that step itself, with the metric the run logged, where it would have
come: after every hook of the epoch's end (its checkpoints keep the state from before the step, as Lightning's
do), before the next epoch's first batch. A step owed when the run stops right then is kept in the checkpoint,
with the metric, and taken by the run that resumes.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from ..lightning_internals import count_scheduler_step, epoch_restarted


class PlateauResume(pl.Callback):
    """Steps the epoch-interval plateau schedulers that Lightning skips at the end of a resumed epoch."""

    def __init__(self) -> None:
        self._owed: dict[int, float | None] = {}  # scheduler index -> the monitored value it steps with
        self._trainer: pl.Trainer | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not epoch_restarted(trainer):
            return
        epoch = trainer.current_epoch + 1
        for index, config in enumerate(trainer.lr_scheduler_configs):
            if config.reduce_on_plateau and config.interval == "epoch" and epoch % config.frequency == 0:
                self._owed[index] = None  # its metric is read once every epoch-end hook has logged

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        owed, self._owed = self._owed, {}
        for index, value in sorted(owed.items()):
            config = trainer.lr_scheduler_configs[index]
            metric = value if value is not None else _metric(trainer, config.monitor)
            if metric is None:
                rank_zero_warn(
                    f"ReduceLROnPlateau: {config.monitor!r} was not logged by the end of the resumed epoch;"
                    " its step for that epoch is skipped"
                )
                continue
            pl_module.lr_scheduler_step(config.scheduler, metric)
            count_scheduler_step(trainer)

    def state_dict(self) -> dict[str, Any]:
        # Saved while the epoch's end is checkpointed: after the hooks that log, so the metric is the one to use.
        trainer, owed = self._trainer, dict(self._owed)
        if trainer is not None:
            for index, value in owed.items():
                owed[index] = (
                    value if value is not None else _metric(trainer, trainer.lr_scheduler_configs[index].monitor)
                )
        return {"owed": {str(index): value for index, value in owed.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._owed = {int(index): value for index, value in state_dict.get("owed", {}).items()}


def _metric(trainer: pl.Trainer, key: str | None) -> float | None:
    value = trainer.callback_metrics.get(key) if key else None
    return None if value is None else float(value)
