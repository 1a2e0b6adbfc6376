"""Exact resume of a compiled network whose loader ends each epoch on a short batch (``drop_last=False``).

``torch.compile`` first builds a graph for the batch size it sees; the first batch of another size (the epoch's
short last one) makes it build a second graph with the batch dimension dynamic, and that newer graph serves every
batch from then on. A run resumed after that point starts again from a static graph until it meets its own short
batch: other kernels (a BatchNorm's batch reductions are split differently), so its weights left the uninterrupted
run's by ~1e-3 (issue 33; lightning-hydra-template's MNIST loaders are of this kind). ``DynamicBatchDim`` marks
the batch dimension of every input dynamic from the first batch, in every process, for each loop whose loader has
a short last batch, when the model holds a compiled part: both runs then compile the one dynamic graph. It says
so in one line. Loaders whose batches all have one size are left alone (a static graph is the faster one).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import CombinedLoader
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.utils.data import DataLoader


class DynamicBatchDim(Callback):
    """Marks the batch dimension dynamic for a compiled model's loops that meet a short batch (see the module)."""

    def __init__(self) -> None:
        self._train = False  # mark the training batches
        self._validation = False  # mark the validation batches

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        short = _short_batches(trainer.train_dataloader) if _compiled(pl_module) else None
        self._train = short is not None
        if short is not None:
            rank_zero_info(
                f"Compiled network: the train loader's last batch is short ({short}), so its batch dimension is"
                " compiled dynamic from the first batch: a resumed run then uses the graph an uninterrupted one"
                " does (drop_last=True keeps one static shape, the faster graph)"
            )

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validation = _compiled(pl_module) and _short_batches(trainer.val_dataloaders) is not None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._train:
            _mark(batch)

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self._validation:
            _mark(batch)


def _compiled(pl_module: pl.LightningModule) -> bool:
    """Whether a part of the model is compiled: ``nn.Module.compile`` in place, or ``torch.compile``'s wrapper."""
    return any(
        getattr(module, "_compiled_call_impl", None) is not None or hasattr(module, "_orig_mod")
        for module in pl_module.modules()
    )


def _short_batches(loaders: Any) -> str | None:
    """``"8 of 16"`` for the first loader whose last batch is shorter than the others (per process), else ``None``."""
    if loaders is None:
        return None
    for loader in CombinedLoader(loaders).flattened:
        if not isinstance(loader, DataLoader) or loader.batch_size is None or loader.drop_last:
            continue
        try:
            samples = len(loader.sampler)  # type: ignore[arg-type]  # per process (a distributed sampler's share)
        except TypeError:
            continue  # an iterable dataset: its length is unknown
        if samples % loader.batch_size:
            return f"{samples % loader.batch_size} of {loader.batch_size}"
    return None


def _mark(batch: Any) -> None:
    """Marks dimension 0 of every tensor in ``batch`` dynamic for ``torch.compile``."""
    apply_to_collection(batch, torch.Tensor, _mark_tensor)


def _mark_tensor(tensor: torch.Tensor) -> None:
    # torch._dynamo.maybe_mark_dynamic is torch.compile's documented way to ask for a dynamic dimension up front;
    # "maybe": a graph that needs a fixed size there (a reshape to it) specializes instead of failing.
    if tensor.dim():
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
