"""Prediction on your own inputs: tensor files in, ``predictions.pt`` and ``predictions.csv`` out."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from torch import Tensor
from torch.utils.data import Dataset


class TensorFiles(Dataset[Tensor]):
    """Images from ``.pt`` files: one file of ``(N, C, H, W)``, or a folder of ``(C, H, W)``/``(N, C, H, W)`` files.

    Every image is checked when loading (shape, finite values), naming the file and index of a bad one.
    ``sources`` names each image (``file.pt`` or ``file.pt[i]``) for the prediction writer.
    """

    def __init__(self, path: str | Path, shape: tuple[int, int, int]) -> None:
        path = Path(path)
        if path.is_dir():
            files = sorted(path.glob("*.pt"))
            if not files:
                raise ValueError(f"predict_path {str(path)!r} holds no .pt files")
        elif path.is_file():
            files = [path]
        else:
            raise ValueError(f"predict_path {str(path)!r} does not exist")
        images, self.sources = [], []
        for file in files:
            tensor = torch.load(file, map_location="cpu", weights_only=True)
            if not isinstance(tensor, Tensor):
                raise ValueError(f"{file} holds a {type(tensor).__name__}, not a tensor")
            stacked = tensor.unsqueeze(0) if tensor.dim() == len(shape) else tensor  # (N, C, H, W)
            if tuple(stacked.shape[1:]) != shape or stacked.dim() != len(shape) + 1:
                raise ValueError(
                    f"{file} has shape {tuple(tensor.shape)}: expected (C, H, W) = {shape} or (N, C, H, W)"
                )
            if not stacked.is_floating_point():
                raise ValueError(f"{file} has dtype {stacked.dtype}: expected floating-point images")
            if (bad := (~stacked.isfinite()).flatten(1).any(dim=1).nonzero()).numel():
                raise ValueError(f"{file} has non-finite values in image {int(bad[0])}")
            images.append(stacked.float())
            single = tensor.dim() == len(shape)
            self.sources += [file.name] if single else [f"{file.name}[{i}]" for i in range(len(stacked))]
        self.images = torch.cat(images)  # (N, C, H, W) float32

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Tensor:
        return self.images[index]  # (C, H, W)


class PredictionWriter(BasePredictionWriter):
    """Writes what ``predict_step`` returns: ``predictions.pt`` (outputs, indices, sources) and ``predictions.csv``.

    The CSV has a row per input: its ``index`` and ``source`` (the dataset's ``sources`` if it has them), then,
    for outputs of several values per input (e.g. class probabilities), ``argmax`` and ``max``, then every value
    (``output_0``, ...). Lightning's ``BasePredictionWriter`` leaves the writing to subclasses. Each process of a
    multi-process run writes its own share (``predictions.rank<r>.*``).
    """

    def __init__(self, output_dir: str | None = None) -> None:
        """Configures the writer.

        Args:
            output_dir: Folder of the files; ``null`` means ``<run directory>/predictions``.
        """
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir

    def write_on_epoch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        predictions: Sequence[Any],
        batch_indices: Sequence[Any],
    ) -> None:
        if len(batch_indices) != 1:
            raise ValueError(f"PredictionWriter supports one predict dataloader, got {len(batch_indices)}")
        outputs = torch.cat(list(predictions)).float().cpu()  # (N, ...)
        indices = [index for batch in batch_indices[0] for index in batch]  # dataloaders x batches x samples
        sources = getattr(trainer.predict_dataloaders.dataset, "sources", None)
        names = [sources[index] if sources is not None else str(index) for index in indices]
        folder = Path(self.output_dir or Path(trainer.log_dir or ".") / "predictions")
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"predictions.rank{trainer.global_rank}" if trainer.world_size > 1 else "predictions"
        torch.save({"outputs": outputs, "indices": torch.as_tensor(indices), "sources": names}, folder / f"{stem}.pt")
        values = outputs.reshape(len(outputs), -1)  # (N, K)
        header = ["index", "source", *(["argmax", "max"] if values.shape[1] > 1 else [])]
        with open(folder / f"{stem}.csv", "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow([*header, *(f"output_{k}" for k in range(values.shape[1]))])
            for index, name, row in zip(indices, names, values.tolist(), strict=True):
                top = [max(range(len(row)), key=row.__getitem__), f"{max(row):.6g}"] if len(row) > 1 else []
                writer.writerow([index, name, *top, *(f"{value:.6g}" for value in row)])
