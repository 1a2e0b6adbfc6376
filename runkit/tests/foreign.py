"""Code nobody here wrote, written the way other templates and Lightning's docs write it, with nothing from the kit.

``tests/kit/test_foreign_code.py`` runs it through every command, beside Lightning's own demo classes.

- ``HydraStyleModule``/``HydraStyleData``: lightning-hydra-template's shape. The optimizer and the scheduler
  come in as factories (hydra's ``_partial_: true``; here LightningCLI's callables), the schedule is
  ReduceLROnPlateau on ``val/loss`` by epoch, ``num_classes`` lives on the datamodule only, metrics are
  torchmetrics objects, and the dataset augments with the global torch RNG. One change from that template:
  the factories are kept as attributes, since under LightningCLI ``self.hparams`` holds the config (plain
  values, so that a checkpoint rebuilds the module), not the objects built from it.
- ``BringsItsOwn``: no ``configure_optimizers`` (``--optimizer``/``--lr_scheduler`` from the command line) and
  its own loaders (``--data null``).
- ``StatefulData``: a training loader that is torchdata's ``StatefulDataLoader`` (what Lightning advises for
  mid-epoch resume), with workers and augmentation.
- ``OneCycleModule``: the schedule Lightning's docs show, ``OneCycleLR`` sized from
  ``trainer.estimated_stepping_batches`` in ``configure_optimizers`` and stepped every step.
- ``CompiledInSetup``: lightning-hydra-template's ``compile``: ``setup`` replaces the network by
  ``torch.compile(self.net)`` when fitting, so the run's checkpoints hold ``_orig_mod.`` keys.
- ``CompiledBatchNorm``: ``CompiledInSetup`` with BatchNorm in its network, whose batch reductions a dynamic-shape
  graph computes differently from a static one.
- ``LoadedInEvalMode``: the classifier with its network loaded as ``from_pretrained`` returns one: in eval mode.
- ``SAMModule``: sharpness-aware minimization as people copy it (davda54/sam's ``SAM`` optimizer) with manual
  optimization: two ``manual_backward`` passes a batch, ``first_step`` then ``second_step``, whose
  ``self.base_optimizer.step()`` Lightning never sees, so ``global_step`` stays 0.
- ``TwoSetsModule``/``TwoValidationSets``: two validation loaders, ``val/loss`` logged for each (Lightning names them
  ``val/loss/dataloader_idx_0`` and ``_1``).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification import MulticlassAccuracy


class Blobs(Dataset):
    """Gaussian blobs, one per class, in ``features`` dimensions; training samples get noise from torch's RNG."""

    def __init__(self, size: int, features: int, classes: int, augment: bool, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        centers = torch.randn(classes, features, generator=torch.Generator().manual_seed(0)) * 2
        self.labels = torch.randint(0, classes, (size,), generator=generator)
        self.inputs = centers[self.labels] + torch.randn(size, features, generator=generator)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        x = self.inputs[index]
        return (x + 0.1 * torch.randn_like(x) if self.augment else x), self.labels[index]


class HydraStyleData(pl.LightningDataModule):
    """``num_classes`` here only: the model does not take it."""

    def __init__(self, batch_size: int = 16, num_workers: int = 0, train_size: int = 128) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.num_classes = 4

    def setup(self, stage: str) -> None:
        self.train = Blobs(self.hparams.train_size, 8, self.num_classes, augment=True, seed=1)
        self.val = Blobs(64, 8, self.num_classes, augment=False, seed=2)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, self.hparams.batch_size, shuffle=True, num_workers=self.hparams.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, self.hparams.batch_size, num_workers=self.hparams.num_workers)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()


class HydraStyleModule(pl.LightningModule):
    """A classifier with factories for its optimizer and scheduler, and ReduceLROnPlateau by epoch."""

    def __init__(
        self,
        optimizer: OptimizerCallable = torch.optim.Adam,
        scheduler: LRSchedulerCallable | None = None,
        hidden: int = 16,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)
        self.optimizer, self.scheduler = optimizer, scheduler
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 4))
        self.train_acc, self.val_acc = MulticlassAccuracy(4), MulticlassAccuracy(4)
        self.train_loss, self.val_loss, self.val_acc_best = MeanMetric(), MeanMetric(), MaxMetric()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        logits = self(batch[0])
        loss = F.cross_entropy(logits, batch[1])
        self.train_loss(loss)
        self.train_acc(logits, batch[1])
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        logits = self(batch[0])
        self.val_loss(F.cross_entropy(logits, batch[1]))
        self.val_acc(logits, batch[1])
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        self.val_acc_best(self.val_acc.compute())
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.log("test/loss", F.cross_entropy(self(batch[0]), batch[1]))

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer(params=self.trainer.model.parameters())
        if self.scheduler is None:
            return {"optimizer": optimizer}
        scheduler = self.scheduler(optimizer=optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss", "interval": "epoch", "frequency": 1},
        }


class OneCycleModule(HydraStyleModule):
    """The same classifier, its LR following ``OneCycleLR`` over the run's optimizer steps."""

    def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam, hidden: int = 16, max_lr: float = 0.05) -> None:
        super().__init__(optimizer=optimizer, hidden=hidden)
        self.max_lr = max_lr

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer(params=self.trainer.model.parameters())
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.max_lr, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class CompiledInSetup(HydraStyleModule):
    """The classifier, its network compiled in ``setup`` as lightning-hydra-template does it."""

    def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam, hidden: int = 16, compile: bool = True) -> None:
        super().__init__(optimizer=optimizer, hidden=hidden)

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit":
            self.net = torch.compile(self.net)


class CompiledBatchNorm(CompiledInSetup):
    """The compiled classifier with BatchNorm after each hidden layer."""

    def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam, hidden: int = 32, compile: bool = True) -> None:
        super().__init__(optimizer=optimizer, hidden=hidden, compile=compile)
        self.net = nn.Sequential(
            nn.Linear(8, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden),
            nn.ReLU(), nn.Linear(hidden, 4),
        )  # fmt: skip


class LoadedInEvalMode(HydraStyleModule):
    """The classifier, its network "loaded" as Hugging Face's ``from_pretrained`` returns a model: in eval mode."""

    def __init__(self, optimizer: OptimizerCallable = torch.optim.Adam, hidden: int = 16) -> None:
        super().__init__(optimizer=optimizer, hidden=hidden)
        self.net.eval()


class BringsItsOwn(pl.LightningModule):
    """No ``configure_optimizers`` and its own loaders: the optimizer comes from the command line."""

    def __init__(self, hidden: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 4))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self(batch[0]), batch[1])
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.log("val/loss", F.cross_entropy(self(batch[0]), batch[1]))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Blobs(128, 8, 4, augment=True, seed=1), batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Blobs(64, 8, 4, augment=False, seed=2), batch_size=16)


class StatefulData(HydraStyleData):
    """The same data, its training loader torchdata's ``StatefulDataLoader`` (it saves its own position)."""

    def train_dataloader(self) -> DataLoader:
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(
            self.train, self.hparams.batch_size, shuffle=True, num_workers=self.hparams.num_workers
        )


class TwoValidationSets(HydraStyleData):
    """The same data, validated on two sets: the held-out one and a noisier one."""

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.noisy = Blobs(64, 8, self.num_classes, augment=True, seed=3)

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(self.val, self.hparams.batch_size), DataLoader(self.noisy, self.hparams.batch_size)]


class TwoSetsModule(pl.LightningModule):
    """A classifier that logs its loss on each validation loader, under the same name."""

    def __init__(self, hidden: int = 16, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self.net(batch[0]), batch[1])
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val/loss", F.cross_entropy(self.net(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimization (Foret et al. 2021) as davda54/sam writes it: a step to the worst nearby
    weights, then the base optimizer's step from the original weights with the gradient found there."""

    def __init__(self, params: Any, base_optimizer: type[torch.optim.Optimizer], rho: float = 0.05, **kwargs: Any):
        defaults = dict(rho=rho, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad: bool = False) -> None:
        grad_norm = torch.norm(
            torch.stack(
                [p.grad.norm(p=2) for group in self.param_groups for p in group["params"] if p.grad is not None]
            ),
            p=2,
        )
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                p.add_(p.grad * scale.to(p))
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad: bool = False) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()


class SAMModule(pl.LightningModule):
    """A classifier trained with SAM over SGD, by manual optimization. (No momentum: davda54/sam's ``state_dict`` is
    SAM's own, without its base optimizer's state, so any resume would lose the momentum buffers.)"""

    def __init__(self, lr: float = 0.05, rho: float = 0.05, hidden: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 4))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        optimizer = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss)
        optimizer.first_step(zero_grad=True)
        self.manual_backward(F.cross_entropy(self(x), y))
        optimizer.second_step(zero_grad=True)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.log("val/loss", F.cross_entropy(self(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return SAM(self.parameters(), torch.optim.SGD, rho=self.hparams.rho, lr=self.hparams.lr)
