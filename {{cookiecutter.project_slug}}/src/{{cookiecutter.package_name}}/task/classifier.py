"""The example task's LightningModule: classification loss, per-stage metrics, optimizer and schedule wiring."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn
from torch.optim import Optimizer
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from ..kit import ScheduleCallable
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
    ) -> None:
        """Wraps a network for training.

        Args:
            network: The network's class (``class_path``, see ``networks.py``) and its arguments; it is built
                here with ``num_classes`` and ``input_shape``.
            num_classes: Number of classes (linked from the datamodule).
            input_shape: ``(C, H, W)`` of one image (linked from the datamodule).
            optimizer: Optimizer class and arguments; called with the parameters.
            scheduler: LR schedule; called with the optimizer and the total number of optimizer steps
                and stepped every optimizer step. ``null`` keeps the LR constant.
            label_smoothing: Cross-entropy label smoothing in ``[0, 1)``.
            compile_network: Compile the network in place with ``torch.compile`` (state_dict keys unchanged), and
                give the optimizer a one-kernel step (``fused``, see ``with_fast_step``).
        """
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        # Under the CLI the hyperparameters are the plain config, so `load_from_checkpoint` can rebuild
        # the model; built by hand they would be live objects, which `weights_only` loading refuses.
        self.save_hyperparameters()
        if live := [name for name, value in self.hparams.items() if not _is_plain(value)]:
            self.save_hyperparameters(ignore=live)
        check_optimization(optimizer, scheduler)
        self.network = network(num_classes, input_shape)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
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
        # Compile the network, not this module: a compiled LightningModule breaks `self.log`
        # (lightning#21836), and `torch.compile(net)` would prefix checkpoint keys with `_orig_mod.`.
        if self.compile_network and getattr(self.network, "_compiled_call_impl", None) is None:
            self.network.compile()

    def forward(self, images: Tensor) -> Tensor:
        return self.network(images)  # (B, num_classes) logits

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def predict_step(self, batch: Batch | Tensor, batch_idx: int) -> Tensor:
        images = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(images).float().softmax(dim=-1)  # (B, num_classes) class probabilities

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.compile_network:
            # lightning#21435: Lightning refuses a fused optimizer with clipping under mixed precision.
            clips_mixed = bool(self.trainer.gradient_clip_val) and str(self.trainer.precision).endswith("-mixed")
            optimizer = with_fast_step(optimizer, fused=not clips_mixed)
        if self.scheduler_factory is None:
            return optimizer
        total_steps = self.trainer.estimated_stepping_batches
        scheduler = self.scheduler_factory(optimizer, total_steps)  # type: ignore[arg-type]
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}

    def on_train_start(self) -> None:
        # A checkpoint's param groups carry the step kind of the run that wrote it (`fused`, `foreach`): a resumed
        # run keeps the one it was built with, so eager and compiled runs resume from each other's checkpoints.
        for optimizer in self.trainer.optimizers:
            for group in optimizer.param_groups:
                group.update({key: optimizer.defaults[key] for key in STEP_KINDS if key in optimizer.defaults})

    def _shared_step(self, batch: Batch, stage: str) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
        accuracy, mean_loss = self.metrics[f"{stage}_acc"], self.metrics[f"{stage}_loss"]
        # Metric objects accumulate detached state and are synchronised across processes at epoch end.
        accuracy(logits.detach(), labels)
        mean_loss(loss.detach(), weight=len(labels))
        on_step = stage == "train"
        self.log(f"{stage}/loss", mean_loss, on_step=on_step, on_epoch=True, prog_bar=True)
        self.log(f"{stage}/acc", accuracy, on_step=on_step, on_epoch=True, prog_bar=stage != "train")
        return loss


STEP_KINDS = ("fused", "foreach")
"""Optimizer settings that choose how ``step`` runs (one kernel for all parameters, one per operation, a loop)."""


def with_fast_step(optimizer: Optimizer, fused: bool = True) -> Optimizer:
    """``optimizer`` rebuilt with the same settings and a faster step: ``fused`` (one kernel), else ``foreach``.

    Unchanged when its class offers neither, when it is ``differentiable``, or when the config chose either.
    On a CPU, PyTorch's default is a Python loop over the parameters. The state the step keeps is the same, so
    checkpoints load across the two.
    """
    defaults = optimizer.defaults
    if any(key not in defaults or defaults[key] is not None for key in STEP_KINDS) or defaults.get("differentiable"):
        return optimizer
    kind = {"fused": True} if fused else {"foreach": True}
    accepted = inspect.signature(type(optimizer)).parameters
    settings = {key: value for key, value in defaults.items() if key in accepted}
    return type(optimizer)([{**group, **kind} for group in optimizer.param_groups], **{**settings, **kind})


def check_optimization(optimizer: OptimizerCallable, scheduler: ScheduleCallable | None) -> None:
    """Builds the optimizer and the schedule once, on a stand-in parameter, and raises what they refuse.

    ``configure_optimizers`` builds them only inside ``fit``, after the data is set up: a negative learning rate
    or a warmup fraction above 1 is refused here, when the model is built, instead. The schedule's length is
    not known yet; an ample one checks every other argument.
    """
    try:
        probe = optimizer([nn.Parameter(torch.zeros(1))])
    except ValueError as error:
        raise ValueError(f"optimizer: {error}") from None
    if scheduler is None:
        return
    try:
        scheduler(probe, 2**31)
    except ValueError as error:
        raise ValueError(f"scheduler: {error}") from None


def _is_plain(value: object) -> bool:
    """Whether ``value`` is built of config types only (what a ``weights_only`` load accepts)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))
