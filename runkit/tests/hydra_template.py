"""A module and datamodule shaped as lightning-hydra-template's ``src/models/mnist_module.py`` and
``src/data/mnist_datamodule.py`` are (not copied: written here to the same interface), for the migration guide's test
(``docs/migrate-from-hydra-template.md``, ``tests/test_hydra_template.py``).

What matters is the template's interface, kept line for line in meaning: ``net: torch.nn.Module``,
``optimizer: torch.optim.Optimizer`` and ``scheduler: torch.optim.lr_scheduler`` (a module as the annotation: Hydra
passes partials, ``_partial_: true``), ``save_hyperparameters(logger=False)``, and ``configure_optimizers`` calling
``self.hparams.optimizer(params=self.parameters())`` and ``self.hparams.scheduler(optimizer=optimizer)`` with
ReduceLROnPlateau's ``monitor: val/loss`` by epoch; torchmetrics ``Accuracy``/``MeanMetric``/``MaxMetric`` per stage,
the validation metrics reset in ``on_train_start``, ``val/acc_best`` logged with ``sync_dist=True``. The network is
the template's ``SimpleDenseNet`` shape (flatten, Linear-BatchNorm-ReLU blocks), the data tiny random "digits" of
``(1, 28, 28)`` (the machine is offline: no MNIST download).
"""

from itertools import pairwise
from typing import Any

import torch
from lightning import LightningDataModule, LightningModule
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification.accuracy import Accuracy


class DenseNet(torch.nn.Module):
    """The template's ``SimpleDenseNet`` shape: flatten, three Linear-BatchNorm-ReLU blocks, a Linear to classes."""

    def __init__(
        self,
        input_size: int = 784,
        lin1_size: int = 64,
        lin2_size: int = 64,
        lin3_size: int = 32,
        output_size: int = 10,
    ) -> None:
        super().__init__()
        sizes = [input_size, lin1_size, lin2_size, lin3_size]
        blocks = [
            layer
            for n_in, n_out in pairwise(sizes)
            for layer in (torch.nn.Linear(n_in, n_out), torch.nn.BatchNorm1d(n_out), torch.nn.ReLU())
        ]
        self.model = torch.nn.Sequential(*blocks, torch.nn.Linear(lin3_size, output_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.view(x.size(0), -1))


class MNISTLitModule(LightningModule):
    """The template's MNIST module, its interface as the template writes it (see the module docstring)."""

    def __init__(
        self,
        net: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.net = net
        self.criterion = torch.nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=10)
        self.val_acc = Accuracy(task="multiclass", num_classes=10)
        self.test_acc = Accuracy(task="multiclass", num_classes=10)
        self.train_loss, self.val_loss, self.test_loss = MeanMetric(), MeanMetric(), MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def on_train_start(self) -> None:
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = self.forward(x)
        return self.criterion(logits, y), torch.argmax(logits, dim=1), y

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        self.val_acc_best(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.test_loss(loss)
        self.test_acc(preds, targets)
        self.log("test/loss", self.test_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True, prog_bar=True)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.parameters())
        if self.hparams.scheduler is not None:
            scheduler = self.hparams.scheduler(optimizer=optimizer)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {
                    "scheduler": scheduler,
                    "monitor": "val/loss",
                    "interval": "epoch",
                    "frequency": 1,
                },
            }
        return {"optimizer": optimizer}


class MNISTDataModule(LightningDataModule):
    """The template's datamodule arguments (``data_dir``, ``batch_size``, ``num_workers``, ``pin_memory``) over tiny
    random digits: 128 to train on (the last batch short at 48), 64 to validate."""

    def __init__(self, data_dir: str = "data/", batch_size: int = 40, num_workers: int = 0, pin_memory: bool = False):
        super().__init__()
        self.save_hyperparameters(logger=False)

    def setup(self, stage: str | None = None) -> None:
        generator = torch.Generator().manual_seed(0)
        images, labels = (
            torch.randn(192, 1, 28, 28, generator=generator),
            torch.randint(0, 10, (192,), generator=generator),
        )
        self.data_train = TensorDataset(images[:128], labels[:128])
        self.data_val = TensorDataset(images[128:], labels[128:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.data_train, self.hparams.batch_size, shuffle=True, num_workers=self.hparams.num_workers,
            pin_memory=self.hparams.pin_memory,
        )  # fmt: skip

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.data_val, self.hparams.batch_size, num_workers=self.hparams.num_workers)
