"""A team's code written against the ``pytorch_lightning`` package (Lightning's former name, still published) rather
than ``lightning.pytorch``: the same classes, which LightningCLI's parser does not accept as the project's."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torch import Tensor, nn


class OldStyleRegressor(pl.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.net, self.lr = nn.Linear(16, 1), lr

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class OldStyleData(pl.LightningDataModule):
    input_shape = (16,)
