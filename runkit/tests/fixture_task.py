"""The kit tests' own task, not images: regress the slope of a noisy 1-D sequence.

Ordinary code, as a team writes it on day one, with nothing from the kit: a map-style ``Dataset`` whose
``__getitem__`` augments with the global torch, ``random`` and NumPy RNGs, ``DataLoader(shuffle=True)``,
and a LightningModule with its own optimizer and a schedule sized from ``estimated_stepping_batches``.
The kit's tests run on it, so they keep passing when a team replaces the example task.
"""

from __future__ import annotations

import random
from typing import Any, Literal

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from torchmetrics import MeanAbsoluteError, MeanSquaredError, MetricCollection

Batch = tuple[Tensor, Tensor]  # sequences (B, L) float32, slopes (B, 1) float32


class Sequences(Dataset[Batch]):
    """Sequences and their slopes; training samples get noise, a random gain and a random shift."""

    def __init__(self, inputs: Tensor, targets: Tensor, augment: bool) -> None:
        self.inputs, self.targets, self.augment = inputs, targets, augment

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> Batch:
        x = self.inputs[index].clone()  # (L,)
        if self.augment:
            x = x + 0.05 * torch.randn_like(x)  # torch's global RNG
            x = x * random.uniform(0.9, 1.1)  # Python's
            x = x + float(np.random.normal(0.0, 0.05))  # NumPy's
        return x, self.targets[index]


class SequenceData(pl.LightningDataModule):
    """Noisy lines ``slope * t + noise`` over ``length`` points; the target is the slope."""

    def __init__(
        self,
        length: int = 16,
        train_size: int = 256,
        val_size: int = 64,
        batch_size: int = 16,
        num_workers: int = 0,
        persistent_workers: bool = False,
        seed: int = 0,
        augment: bool = True,
    ) -> None:
        """Configures the data.

        Args:
            length: Points per sequence.
            train_size: Training sequences.
            val_size: Validation (also test and predict) sequences.
            batch_size: Sequences per batch.
            num_workers: DataLoader worker processes.
            persistent_workers: Keep the workers between epochs (with ``num_workers > 0``).
            seed: Seed of the data itself.
            augment: Random noise, gain and offset on training sequences.
        """
        super().__init__()
        self.input_shape = (length,)  # the kit links it into the model's `input_shape`
        self.length, self.sizes = length, {"train": train_size, "val": val_size}
        self.batch_size, self.num_workers, self.seed, self.augment = batch_size, num_workers, seed, augment
        self.persistent_workers = persistent_workers and num_workers > 0
        self.datasets: dict[str, Sequences] = {}

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        t = torch.linspace(0.0, 1.0, self.length)  # (L,)
        for split, size in self.sizes.items():
            slopes = torch.rand(size, 1, generator=generator) * 2 - 1  # (N, 1)
            inputs = slopes * t + 0.1 * torch.randn(size, self.length, generator=generator)  # (N, L)
            self.datasets[split] = Sequences(inputs, slopes, augment=self.augment and split == "train")

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.datasets["train"],
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            persistent_workers=self.persistent_workers,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            self.datasets["val"],
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.persistent_workers,
        )

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()


class SequenceRegressor(pl.LightningModule):
    """A small MLP with dropout, and AdamW (or SGD) under a one-cycle schedule stepped every optimizer step."""

    def __init__(
        self,
        input_shape: tuple[int, ...] = (16,),
        hidden: int = 32,
        dropout: float = 0.1,
        lr: float = 0.01,
        optimizer: Literal["adamw", "sgd"] = "adamw",
        schedule: Literal["onecycle", "plateau", "step"] = "onecycle",
    ) -> None:
        """Builds the model.

        Args:
            input_shape: ``(L,)`` of one sequence (linked from the datamodule).
            hidden: Hidden width.
            dropout: Dropout probability.
            lr: Peak learning rate.
            optimizer: ``adamw``, or plain ``sgd`` (whose step is proportional to the gradient).
            schedule: ``onecycle`` stepped every optimizer step, sized from ``estimated_stepping_batches``;
                ``plateau``: ReduceLROnPlateau on ``val/loss`` with ``patience=0`` and a threshold it never meets
                (it reduces the LR after every epoch but the first);
                ``step``: StepLR by epoch (``interval: epoch``), halving the LR every epoch.
        """
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(input_shape[0], hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)  # (B, 1)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss = F.mse_loss(self(batch[0]), batch[1])
        self.log("train/loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.log("val/loss", F.mse_loss(self(batch[0]), batch[1]), sync_dist=True)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.log("test/loss", F.mse_loss(self(batch[0]), batch[1]))

    def predict_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        kind = torch.optim.AdamW if self.hparams.optimizer == "adamw" else torch.optim.SGD
        optimizer = kind(self.parameters(), lr=self.hparams.lr)
        if self.hparams.schedule == "plateau":  # as lightning-hydra-template's modules use it
            plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=0, threshold=0.99)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "val/loss"}}
        if self.hparams.schedule == "step":
            step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": step, "interval": "epoch"}}
        total = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class LinearRegressor(SequenceRegressor):
    """The same task with one linear layer: a model whose checkpoints do not fit ``SequenceRegressor``."""

    def __init__(self, input_shape: tuple[int, ...] = (16,), lr: float = 0.01) -> None:
        """Builds the model.

        Args:
            input_shape: ``(L,)`` of one sequence (linked from the datamodule).
            lr: Peak learning rate.
        """
        super().__init__(input_shape, lr=lr)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0], 1))


class CollectiveRegressor(SequenceRegressor):
    """The same model, with a collective of its own at epoch end, as torchmetrics users write it: a
    ``MetricCollection`` updated every step, computed (an all-gather under DDP) and logged with ``sync_dist=True`` in
    ``on_train_epoch_end``; the loss is logged per epoch with ``sync_dist=True`` too (an all-reduce when read)."""

    def configure_model(self) -> None:
        # Here, not in __init__: the constructor and its hyperparameters stay SequenceRegressor's.
        self.train_metrics = MetricCollection({"mse": MeanSquaredError(), "mae": MeanAbsoluteError()}, prefix="train/")

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        prediction = self(batch[0])
        loss = F.mse_loss(prediction, batch[1])
        self.train_metrics.update(prediction.detach(), batch[1])
        self.log("train/loss", loss, on_step=True, on_epoch=True, sync_dist=True)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log_dict(self.train_metrics.compute(), sync_dist=True)
        self.train_metrics.reset()


class ShardedRegressor(SequenceRegressor):
    """The same model sharded with FSDP2 (``fully_shard``) over the data-parallel mesh of Lightning's
    ``ModelParallelStrategy``: each process holds half of every weight and of its optimizer state."""

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard

        mesh = self.device_mesh["data_parallel"]
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(self.net, mesh=mesh)
