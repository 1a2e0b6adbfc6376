"""The example task's LightningModule: classification loss, per-stage metrics; the optimizer and schedule by the kit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from runkit import (
    ScheduleCallable,
    check_optimization,
    compile_in_place,
    configure_optimization,
    keep_step_kinds,
    logging_step,
    save_plain_hyperparameters,
)
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from .networks import ConvNet

Batch = tuple[Tensor, Tensor]  # images (B, C, H, W) float32, labels (B,) int64
NetworkCallable = Callable[[int, tuple[int, ...]], nn.Module]
"""Builds the network from ``num_classes`` and ``input_shape``: a class of ``networks.py`` and its other arguments."""


class Classifier(pl.LightningModule):
    """Trains any ``nn.Module`` that maps images to ``num_classes`` logits with cross-entropy."""

    def __init__(
        self,
        network: NetworkCallable = ConvNet,
        num_classes: int = 10,
        input_shape: tuple[int, ...] = (1, 28, 28),
        optimizer: OptimizerCallable = torch.optim.AdamW,
        scheduler: ScheduleCallable | None = None,
        label_smoothing: float = 0.0,
        compile_network: bool = False,
        scheduler_interval: Literal["step", "epoch"] | None = None,
        scheduler_monitor: str = "val/loss",
    ) -> None:
        """Wraps a network for training.

        Args:
            network: The network's class (``class_path``, see ``networks.py``) and its arguments; it is built
                here with ``num_classes`` and ``input_shape``.
            num_classes: Number of classes (linked from the datamodule).
            input_shape: ``(C, H, W)`` of one image (linked from the datamodule).
            optimizer: Optimizer class and arguments; called with the parameters.
            scheduler: LR schedule (any torch scheduler by class path); one that declares ``total_steps``
                (``WarmupCosine``, ``OneCycleLR``) is given the run's length. ``null`` keeps the LR constant.
            label_smoothing: Cross-entropy label smoothing in ``[0, 1)``.
            compile_network: Compile the network in place with ``torch.compile`` (state_dict keys unchanged), and
                give the optimizer a one-kernel step (``fused``, see ``runkit.parts.compiled``).
            scheduler_interval: ``step`` or ``epoch``; ``null``: ``epoch`` for ``ReduceLROnPlateau``, else ``step``.
            scheduler_monitor: The logged metric a ``ReduceLROnPlateau`` schedule reads.
        """
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        save_plain_hyperparameters(self)  # what `load_from_checkpoint` rebuilds it from, `weights_only`-safe
        check_optimization(optimizer, scheduler)
        self.network = network(num_classes, input_shape)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval, self.scheduler_monitor = scheduler_interval, scheduler_monitor
        self.label_smoothing = label_smoothing
        self.compile_network = compile_network
        self.metrics = nn.ModuleDict(
            {
                f"{stage}_{kind}": MulticlassAccuracy(num_classes, average="micro") if kind == "acc" else MeanMetric()
                for stage in ("train", "val", "test")
                for kind in ("acc", "loss")
            }
        )

    def configure_model(self) -> None:
        if self.compile_network:
            compile_in_place(self.network)  # the network, not this module (see runkit.parts.compiled)

    def forward(self, images: Tensor) -> Tensor:
        return self.network(images)  # (B, num_classes) logits

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        logits, loss = self._shared_step(batch, "train")
        if logging_step(self):  # the logger writes step values every `log_every_n_steps`: log only those
            accuracy = (logits.argmax(dim=-1) == batch[1]).float().mean()
            self.log_dict({"train/loss_step": loss.detach(), "train/acc_step": accuracy}, prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train", suffix="_epoch")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def predict_step(self, batch: Batch | Tensor, batch_idx: int) -> Tensor:
        images = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(images).float().softmax(dim=-1)  # (B, num_classes) class probabilities

    def configure_optimizers(self) -> Any:
        return configure_optimization(
            self,
            self.optimizer_factory,
            self.scheduler_factory,
            interval=self.scheduler_interval,
            monitor=self.scheduler_monitor,
            fast_step=self.compile_network,
        )

    def on_train_start(self) -> None:
        keep_step_kinds(self.trainer)  # eager and compiled runs resume from each other's checkpoints

    def _shared_step(self, batch: Batch, stage: str) -> tuple[Tensor, Tensor]:
        images, labels = batch
        logits = self(images)  # (B, num_classes)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
        # Metric objects accumulate detached state every step (cheap); their value is computed once, at epoch end.
        self.metrics[f"{stage}_acc"].update(logits.detach(), labels)
        self.metrics[f"{stage}_loss"].update(loss.detach(), weight=len(labels))
        return logits, loss

    def _log_epoch(self, stage: str, suffix: str = "") -> None:
        """Logs the stage's epoch loss and accuracy (``compute`` gathers them across processes) and starts them over."""
        values = {kind: self.metrics[f"{stage}_{kind}"] for kind in ("loss", "acc")}
        self.log_dict({f"{stage}/{kind}{suffix}": metric.compute() for kind, metric in values.items()}, prog_bar=True)
        for metric in values.values():
            metric.reset()
