"""Checks before a subcommand runs: the Trainer's settings, the paths it writes to, and what the task provides.

Each raises ``BadInputError`` naming the key, or the class and the method it lacks, before any hook of the task
runs and before anything is written. Lightning accepts some of these values and fails later (a division by
zero after the first epoch for ``check_val_every_n_epoch: 0``) or ignores them (a negative
``gradient_clip_val`` clips nothing); others it refuses deep inside ``fit`` with a generic message.
"""

from __future__ import annotations

import math
import os
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..bad_input import BadInputError
from ..lightning_internals import logged_names
from ..safety.checkpoints import BestCheckpoint
from ..safety.rendezvous import check_launcher
from .folder_checks import check_data_folders
from .folder_checks import check_folder as check_folder  # where the command line and others import them from
from .folder_checks import check_paths as check_paths

# The LightningModule methods and loader hooks each subcommand calls (a loader may sit on the model instead).
NEEDS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "fit": (("training_step", "configure_optimizers"), "train_dataloader"),
    "validate": (("validation_step",), "val_dataloader"),
    "test": (("test_step",), "test_dataloader"),
    "predict": ((), "predict_dataloader"),
    "schedule": (("configure_optimizers",), "train_dataloader"),
}


def check_trainer(trainer: pl.Trainer) -> None:
    """Refuses Trainer settings that Lightning accepts but cannot honour."""
    if trainer.accumulate_grad_batches < 1:
        raise BadInputError(f"trainer.accumulate_grad_batches must be >= 1, got {trainer.accumulate_grad_batches}")
    clip = trainer.gradient_clip_val
    if clip is not None and not (clip >= 0 and math.isfinite(clip)):  # Lightning skips clipping for clip <= 0
        raise BadInputError(f"trainer.gradient_clip_val must be >= 0 (0 or null: no clipping), got {clip}")
    every = trainer.check_val_every_n_epoch
    if every is not None and every < 1:
        raise BadInputError(f"trainer.check_val_every_n_epoch must be >= 1 or null, got {every}")
    interval = trainer.val_check_interval
    if isinstance(interval, (int, float)) and interval <= 0:
        raise BadInputError(f"trainer.val_check_interval must be > 0, got {interval}")
    if trainer.num_sanity_val_steps < 0:  # -1 (all batches) is stored as inf
        raise BadInputError(f"trainer.num_sanity_val_steps must be >= -1, got {trainer.num_sanity_val_steps}")
    if trainer.log_every_n_steps < 0:  # Lightning logs every step: `step % -1` is always 0
        raise BadInputError(
            f"trainer.log_every_n_steps must be >= 0 (0: no step logged), got {trainer.log_every_n_steps}"
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if isinstance(trainer.accelerator, CPUAccelerator) and trainer.num_devices > cores:
        # Each CPU process wants at least a core of its own; more only slows every process down.
        raise BadInputError(
            f"trainer.devices: {trainer.num_devices} processes on this machine's {cores} CPU cores would share"
            f" cores: use --trainer.devices {cores} or fewer"
        )
    check_launcher(trainer)  # a multi-node run needs a launcher; a stop signal ends its processes' meeting


def check_task(subcommand: str, model: pl.LightningModule, datamodule: pl.LightningDataModule | None) -> None:
    """Refuses a task that lacks a method or loader ``subcommand`` calls, naming the class and the method."""
    methods, loader = NEEDS.get(subcommand, ((), None))
    for method in methods:
        if not is_overridden(method, model):
            raise BadInputError(f"model: {type(model).__name__} has no {method}(), which `{subcommand}` needs")
    if subcommand == "predict" and not (is_overridden("predict_step", model) or is_overridden("forward", model)):
        raise BadInputError(f"model: {type(model).__name__} has no predict_step() or forward(): `predict` needs one")
    if loader is not None and not has_loader(loader, model, datamodule):
        raise BadInputError(f"data: {_data_name(model, datamodule)} has no {loader}(), which `{subcommand}` needs")
    check_data_folders(datamodule)
    if subcommand == "export":
        if not is_overridden("forward", model):
            raise BadInputError(f"model: {type(model).__name__} has no forward(), the function `export` traces")
        if model.example_input_array is None and not has_loader("predict_dataloader", model, datamodule):
            raise BadInputError(
                f"data: {_data_name(model, datamodule)} has no predict_dataloader() and model: {type(model).__name__}"
                " no example_input_array: `export` needs one of them for an input batch to trace"
            )


def check_monitor(trainer: pl.Trainer, model: pl.LightningModule, datamodule: pl.LightningDataModule | None) -> None:
    """Refuses a validation metric monitored (by ``best_checkpoint``, an ``EarlyStopping``) when nothing validates."""
    for key, monitor in monitored_metrics(trainer):
        if not is_validation_metric(monitor):
            continue
        if not is_overridden("validation_step", model):
            missing = f"{type(model).__name__} has no validation_step()"
        elif not has_loader("val_dataloader", model, datamodule):
            missing = f"{_data_name(model, datamodule)} has no val_dataloader()"
        else:  # validation switched off (`limit_val_batches: 0`) is a choice: Lightning warns, no best.ckpt
            continue
        raise BadInputError(
            f"{key}: {monitor!r} is a validation metric, but {missing}: validate, or monitor a training metric"
            " (e.g. train/loss)"
        )


class StartCheck(Callback):
    """What a command starts with: for ``fit``, the monitored validation metric is logged and the train loader is not
    empty; for ``validate``, ``test`` and ``predict`` without a checkpoint, a line saying the weights are untrained.

    Lightning notices an unlogged monitored metric at the first save, after a whole epoch (or ``N`` with
    ``check_val_every_n_epoch: N``), with a message of its own, and a new run's folder is left behind. Here it is
    refused before any training step, naming the metric and what is logged instead: at the end of the sanity check;
    without one (``num_sanity_val_steps: 0``) a one-batch sanity check runs for it; a run resumed mid-epoch (which
    Lightning does not sanity-check) is checked against what its checkpoint's validation logged, saved here. Only a
    checkpoint without that record (written before any validation) leaves it to the first validation.

    An empty train loader makes Lightning end ``fit`` with an info line and exit 0 (the loader is built by Lightning,
    not here: built earlier, it would lose the position a resumed run restores into it, see lightning#20550); an empty
    predict loader, ``predict`` with nothing written and no line. Both are refused once Lightning has built the loader.
    """

    def __init__(self) -> None:
        self._trainer: pl.Trainer | None = None
        self._train_checked = False  # the monitored training metrics, after the first training batch of a session
        self._resolved: str | None = None  # best_checkpoint's monitor, resolved to its `_epoch` form (saved with it)
        self._monitors_checked = False
        self._sanity_steps: int | float | None = None  # the run's own, while a one-batch sanity check runs for it
        self._logged: list[str] = []  # the validation metrics this fit logged last: saved with its checkpoints
        self._saved_logged: list[str] | None = None  # those the checkpoint a run resumes from holds

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._monitors_checked = self._train_checked = False
        self._trainer = trainer  # before the checkpoint's state is restored (load_state_dict)
        if stage == TrainerFn.FITTING and trainer.limit_train_batches == 0:
            # Before configure_optimizers: a schedule sized from the run's steps fails on Lightning's -1 for none,
            # and says max_steps or max_epochs is missing.
            raise BadInputError(
                f"trainer.limit_train_batches: {trainer.limit_train_batches} trains on no batch: `fit` needs at least"
                " one (1.0: all of them; `validate` evaluates without training)"
            )

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING:
            _say_if_untrained(trainer)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        _say_if_untrained(trainer)

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        _say_if_untrained(trainer)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        validated = any(is_validation_metric(monitor) for _, monitor in monitored_metrics(trainer))
        if validated and trainer.enable_validation and trainer.num_sanity_val_steps == 0 and trainer.ckpt_path is None:
            self._sanity_steps, trainer.num_sanity_val_steps = trainer.num_sanity_val_steps, 1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        saved, self._saved_logged = self._saved_logged, None
        if saved and not self._monitors_checked:
            self._refuse_unlogged(trainer, pl_module, saved)  # resumed mid-epoch: no sanity check ran

    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batches = sum(trainer.num_sanity_val_batches)
        if self._sanity_steps is not None:
            trainer.num_sanity_val_steps, self._sanity_steps = self._sanity_steps, None
        self._check_monitors(trainer, pl_module, batches)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        self._logged = _validation_names(trainer)
        # Without a sanity check (a mid-epoch resume from a checkpoint without the record), the first validation.
        if not trainer.sanity_checking:
            self._check_monitors(trainer, pl_module, sum(trainer.num_val_batches))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if not self._train_checked:
            self._train_checked = True
            self._resolve_training_monitors(trainer, pl_module)

    def _resolve_training_monitors(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A training metric monitored by its logged name (``train/loss``) that the module logs per step and per epoch
        (``self.log(..., on_step=True, on_epoch=True)``: ``train/loss_step``, ``train/loss_epoch``): Lightning finds no
        ``train/loss`` at the epoch's end and fails after training it. ``best_checkpoint`` follows ``train/loss_epoch``
        (one line; its state is saved under a fixed key); another callback's monitor is refused, naming the fix."""
        logged = logged_names(trainer)  # a metric logged per step and per epoch: its name and `<name>_epoch`
        for key, monitor in monitored_metrics(trainer):
            epoch = f"{monitor}_epoch"
            if is_validation_metric(monitor) or epoch not in logged:
                continue
            callback = next(c for c in trainer.callbacks if getattr(c, "monitor", None) == monitor)  # type: ignore[attr-defined]
            if isinstance(callback, BestCheckpoint):
                callback.monitor = self._resolved = epoch
                rank_zero_info(
                    f"best_checkpoint.monitor: {type(pl_module).__name__} logs {monitor!r} per step and per epoch"
                    f" ({monitor}_step, {epoch}): best.ckpt follows {epoch}"
                )
                continue
            raise BadInputError(
                f"{key}: {type(pl_module).__name__} logs {monitor!r} per step and per epoch ({monitor}_step, {epoch}),"
                f" never as {monitor!r}: monitor {epoch}"
            )

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"validation_metrics": self._logged} if self._logged else {}
        return {**state, "best_monitor": self._resolved} if self._resolved else state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Kept for the checkpoints this session saves before its first validation, too.
        self._logged = self._saved_logged = state_dict.get("validation_metrics") or []
        # Before best_checkpoint's own state (checkpoint callbacks come last): its ranking is of the resolved metric.
        resolved = state_dict.get("best_monitor")
        for callback in self._trainer.callbacks if resolved and self._trainer is not None else []:  # type: ignore[attr-defined]
            if isinstance(callback, BestCheckpoint) and f"{callback.monitor}_epoch" == resolved:
                callback.monitor = self._resolved = resolved

    def _check_monitors(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batches: int) -> None:
        if self._monitors_checked:
            return
        self._monitors_checked = True
        for key, monitor in monitored_metrics(trainer):
            if is_validation_metric(monitor) and batches == 0:
                raise BadInputError(
                    f"{key}: {monitor!r} is a validation metric, but"
                    f" {_data_name(pl_module, trainer.datamodule)}.val_dataloader() yields no batch"
                )
        self._refuse_unlogged(trainer, pl_module, _validation_names(trainer))

    @staticmethod
    def _refuse_unlogged(trainer: pl.Trainer, pl_module: pl.LightningModule, logged: list[str]) -> None:
        for key, monitor in monitored_metrics(trainer):
            if is_validation_metric(monitor) and monitor not in logged:
                raise BadInputError(
                    f"{key}: {type(pl_module).__name__} never logs {monitor!r}; its validation logs"
                    f" {', '.join(logged) or 'nothing'}"
                )

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # An empty predict loader skips the loop, and every hook of it: this is the first one after it was built.
        empty = trainer.limit_predict_batches != 0 and not sum(trainer.num_predict_batches)
        if stage == TrainerFn.PREDICTING and empty:
            raise BadInputError(
                f"data: {_data_name(pl_module, trainer.datamodule)}.predict_dataloader() yields no batch: `predict` has"
                " nothing to predict"
            )

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.num_training_batches == 0 and trainer.limit_train_batches != 0:
            raise BadInputError(
                f"data: {_data_name(pl_module, trainer.datamodule)}.train_dataloader() yields no batch (is the"
                " training set smaller than one batch, with drop_last?)"
            )


def _say_if_untrained(trainer: pl.Trainer) -> None:
    """One line when ``validate``/``test``/``predict`` measure the weights the model was built with (no checkpoint
    loaded, nothing trained by this trainer): the numbers are an untrained model's, which nothing else says."""
    if trainer.ckpt_path is None and trainer.global_step == 0:  # known once the checkpoint is restored
        rank_zero_info(
            f"{trainer.state.fn.value}: no --ckpt_path, so this measures the weights the model was built with"
            " (freshly initialised, untrained); pass --ckpt_path best, last or a checkpoint file to measure a"
            " trained one"
        )


def monitored_metrics(trainer: pl.Trainer) -> list[tuple[str, str]]:
    """``(key, metric)`` of each callback that keeps checkpoints or stops the run by a logged metric."""
    found = []
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, BestCheckpoint) and callback.follows_loss:
            continue  # follows whatever validation loss is logged, or switches itself off
        if isinstance(callback, (ModelCheckpoint, EarlyStopping)) and callback.monitor:
            key = f"trainer.callbacks: {type(callback).__name__}.monitor"
            found.append(("best_checkpoint.monitor" if isinstance(callback, BestCheckpoint) else key, callback.monitor))
    return found


def _validation_names(trainer: pl.Trainer) -> list[str]:
    """The validation metrics logged so far in the running validation (every loader's)."""
    return sorted(key for key in logged_names(trainer) if is_validation_metric(key))


def is_validation_metric(name: str) -> bool:
    """Whether ``name`` reads as a validation metric: ``val/loss``, ``val_acc``, ``valid/...``, ``validation/...``."""
    return name.split("/")[0].split("_")[0] in {"val", "valid", "validation"}


def has_loader(hook: str, model: pl.LightningModule, datamodule: pl.LightningDataModule | None) -> bool:
    """Whether the datamodule or the model defines the loader hook (Lightning takes it from either)."""
    return is_overridden(hook, datamodule) or is_overridden(hook, model)


def _data_name(model: pl.LightningModule, datamodule: pl.LightningDataModule | None) -> str:
    return type(datamodule if datamodule is not None else model).__name__
