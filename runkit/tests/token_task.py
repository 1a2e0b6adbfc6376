"""A token classifier as Hugging Face models are driven from Lightning (no transformers needed): ``forward(input_ids,
attention_mask)``, a dict ``example_input_array``, dict batches holding ``labels``, integer token ids.

The label is whether token 1 occurs among the unmasked tokens: learnable in an epoch, and only with the mask
read (the padding holds token 1 too).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

VOCAB, LENGTH = 32, 12


class Tokens(Dataset[dict[str, Tensor]]):
    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.input_ids = torch.randint(2, VOCAB, (size, LENGTH), generator=generator)
        lengths = torch.randint(4, LENGTH + 1, (size,), generator=generator)
        self.attention_mask = (torch.arange(LENGTH) < lengths[:, None]).long()
        self.labels = torch.randint(0, 2, (size,), generator=generator)
        for index in range(size):  # label 1: token 1 somewhere in the text
            if self.labels[index]:
                where = torch.randint(0, int(lengths[index]), (1,), generator=generator)
                self.input_ids[index, where] = 1
        self.input_ids[self.attention_mask == 0] = 1  # padding: token 1, which the mask hides

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {
            "input_ids": self.input_ids[index],
            "attention_mask": self.attention_mask[index],
            "labels": self.labels[index],
        }


class TokenData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        self.train, self.val = Tokens(512, seed=1), Tokens(128, seed=2)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, self.batch_size)


class TokenClassifier(pl.LightningModule):
    """Embedding, a masked mean, two Linear layers: logits ``(B, 2)``."""

    def __init__(self, hidden: int = 64, lr: float = 0.01) -> None:
        super().__init__()
        self.lr = lr
        self.embed = nn.Embedding(VOCAB, hidden)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        self.example_input_array = {
            "input_ids": torch.randint(0, VOCAB, (4, LENGTH)),
            "attention_mask": torch.ones(4, LENGTH, dtype=torch.long),
        }

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        mask = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)  # (B, T, 1)
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)  # (B, hidden)
        return self.head(pooled)  # (B, 2)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self(batch["input_ids"], batch["attention_mask"]), batch["labels"])
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        logits = self(batch["input_ids"], batch["attention_mask"])
        self.log("val/acc", (logits.argmax(1) == batch["labels"]).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)
