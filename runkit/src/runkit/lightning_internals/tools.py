"""What the kit's opt-in tools reach inside Lightning: the finders (``tools/finders.py``), the schedule preview
(``tools/schedule_preview.py``) and the W&B tracker's hyperparameters. A plain ``fit`` does not import this module.

The rest of the kit's private Lightning uses, and why they are kept here: ``__init__.py``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
from lightning.pytorch.callbacks import BatchSizeFinder
from lightning.pytorch.core.optimizer import _init_optimizers_and_lr_schedulers
from lightning.pytorch.trainer import call
from lightning.pytorch.tuner.lr_finder import _LRFinder

LRFinderResult = _LRFinder
"""What ``Tuner.lr_find`` returns (its results and ``plot``): the class is private."""


def attach_for_fit(trainer: pl.Trainer, model: pl.LightningModule, datamodule: pl.LightningDataModule | None) -> None:
    """Connects model and data to the Trainer and sets the data up as ``fit`` does, without fitting (``schedule``
    counts a run's steps so). ``fit`` alone does this; its parts are private."""
    trainer.strategy.connect(model)
    trainer._data_connector.attach_data(model, datamodule=datamodule)
    if hasattr(trainer.strategy, "set_world_ranks"):
        trainer.strategy.set_world_ranks()  # what each launched process sees: the world size shards the data
    if datamodule is not None:
        call._call_lightning_datamodule_hook(trainer, "prepare_data")
        call._call_lightning_datamodule_hook(trainer, "setup", stage="fit")


def flat_hyperparameters(params: dict[str, Any] | Any) -> dict[str, Any]:
    """Hyperparameters as Lightning's MLflow logger flattens them (``optimizer/init_args/lr``), for a logger that
    should hold the same keys (``trackers/wandb_logger.py``): ``_convert_params`` and ``_flatten_dict`` are private."""
    return _flatten_dict(_convert_params(params))


def configured_optimizers(model: pl.LightningModule) -> tuple[list[Any], list[Any]]:
    """The optimizers and scheduler configs of ``model.configure_optimizers``, normalised as ``fit`` does."""
    return _init_optimizers_and_lr_schedulers(model)


def end_fit_when_found(finder: BatchSizeFinder) -> None:
    """Makes ``fit`` end once the batch size search is done, as Lightning's ``Tuner.scale_batch_size`` does (a
    private flag of the callback)."""
    finder._early_exit = True


def end_fit_loop(trainer: pl.Trainer) -> None:
    """Tears the fit loop down (its DataLoader workers end) after the train loader was made outside ``fit``
    (``estimated_stepping_batches``); the loop's teardown is private."""
    trainer.fit_loop.teardown()


def run_exactly(trainer: pl.Trainer, steps: int) -> None:
    """Makes the next ``fit`` run ``steps`` optimizer steps, whatever the configured run's length (the finders' trials):
    Lightning's tuner sets the loops' limits the same way, privately."""
    trainer.fit_loop.max_epochs = -1
    trainer.fit_loop.epoch_loop.max_steps = steps
