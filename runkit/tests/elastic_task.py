"""A team's task for the elastic-resume tests: every sample carries its index, and the tests read what trained.

Written as a team writes it, with nothing from the kit: a map-style ``Dataset`` of dicts whose ``__getitem__``
augments with torch's global RNG, ``DataLoader(shuffle=True)``, a module with SGD and momentum, a step-wise LR
schedule and a torchmetrics ``MetricCollection`` computed and logged with ``sync_dist=True`` at epoch end (a collective
of its own). ``TrainedSamples`` (a callback the tests add) writes, for each optimizer step, the
indices each process trained on and a sum of each augmented input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from torchmetrics import MeanAbsoluteError, MeanSquaredError, MetricCollection


class NumberedPoints(Dataset[dict[str, Any]]):
    """Points of a fixed linear map; training samples get noise from torch's global RNG."""

    def __init__(self, inputs: Tensor, targets: Tensor, augment: bool) -> None:
        self.inputs, self.targets, self.augment = inputs, targets, augment

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        x = self.inputs[index]
        if self.augment:
            x = x + 0.1 * torch.randn(x.shape)
        return {"x": x, "y": self.targets[index], "index": index}


class NumberedData(pl.LightningDataModule):
    """``size`` training points and ``size // 4`` validation points in ``features`` dimensions."""

    def __init__(self, size: int = 192, features: int = 8, batch_size: int = 16, num_workers: int = 0) -> None:
        """Configures the data.

        Args:
            size: Training samples.
            features: Input dimensions.
            batch_size: Samples per batch, per process.
            num_workers: Loader worker processes.
        """
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers
        generator = torch.Generator().manual_seed(0)
        weights = torch.randn(features, 1, generator=generator)
        inputs = torch.randn(size + size // 4, features, generator=generator)
        targets = inputs @ weights + 0.1 * torch.randn(len(inputs), 1, generator=generator)
        self.train = NumberedPoints(inputs[:size], targets[:size], augment=True)
        self.val = NumberedPoints(inputs[size:], targets[size:], augment=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, num_workers=self.num_workers)


class NumberedRegressor(pl.LightningModule):
    """A small MLP; ``dropout`` > 0 draws masks from each process's own RNG."""

    def __init__(self, features: int = 8, hidden: int = 32, lr: float = 0.05, dropout: float = 0.0) -> None:
        """Configures the model.

        Args:
            features: Input dimensions.
            hidden: Hidden units.
            lr: SGD's learning rate (momentum 0.9), divided by 2 every 8 steps.
            dropout: Dropout probability after the hidden layer.
        """
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Dropout(dropout), nn.Linear(hidden, 1))
        self.val_metrics = MetricCollection({"mse": MeanSquaredError(), "mae": MeanAbsoluteError()}, prefix="val/")

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        loss = F.mse_loss(self.net(batch["x"]), batch["y"])
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        prediction = self.net(batch["x"])
        self.log("val/loss", F.mse_loss(prediction, batch["y"]), sync_dist=True)
        self.val_metrics.update(prediction, batch["y"])

    def on_validation_epoch_end(self) -> None:
        # The collection's own collective (its compute gathers every process's state), then Lightning's reduction.
        self.log_dict(self.val_metrics.compute(), sync_dist=True)
        self.val_metrics.reset()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=8, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class TrainedSamples(pl.Callback):
    """Appends one JSON line per optimizer step to ``<directory>/session<session>-rank<R>.jsonl``: the step, and the
    index and input sum of each sample this process trained on in it."""

    def __init__(self, directory: str = "samples", session: int = 1) -> None:
        """Configures the record.

        Args:
            directory: Where the files go.
            session: Which session of the run this is (a later session's record of a step replaces an earlier one's).
        """
        self.directory, self.session = Path(directory), session

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        line = {
            "step": trainer.global_step - 1,
            "indices": batch["index"].tolist(),
            "sums": batch["x"].sum(dim=1).tolist(),
        }
        path = self.directory / f"session{self.session}-rank{trainer.global_rank}.jsonl"
        with path.open("a") as file:
            file.write(json.dumps(line) + "\n")


def trained_steps(directory: Path) -> dict[int, dict[int, float]]:
    """For each step, the samples trained in it (index -> input sum) over every process, the latest session's."""
    steps: dict[int, tuple[int, dict[int, float]]] = {}
    for path in sorted(directory.glob("session*-rank*.jsonl")):
        session = int(path.name.removeprefix("session").split("-")[0])
        for text in path.read_text().splitlines():
            line = json.loads(text)
            seen_in, samples = steps.get(line["step"], (0, {}))
            if session > seen_in:
                seen_in, samples = session, {}
            samples.update(zip(line["indices"], line["sums"], strict=True))
            steps[line["step"]] = (seen_in, samples)
    return {step: samples for step, (_, samples) in sorted(steps.items())}
