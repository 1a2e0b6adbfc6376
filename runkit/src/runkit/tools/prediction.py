"""Prediction on your own inputs: tensor files in, ``predictions.pt`` and ``predictions.csv`` out."""

from __future__ import annotations

import csv
import io
import itertools
import pickle
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import Tensor
from torch.utils.data import Dataset

from ..store import RunPath, StorePath, location
from ..writable import unwritable

FOLDER_TIME = "%Y-%m-%d_%H-%M-%S"  # as run folders are named


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
            tensor = _load(file)
            if not isinstance(tensor, Tensor):
                raise ValueError(f"{file} holds a {type(tensor).__name__}, not a tensor")
            if tensor.layout != torch.strided:  # passes the checks below, then fails in the network's first layer
                raise ValueError(
                    f"{file} holds a sparse tensor ({tensor.layout}): expected dense images; save images.to_dense()"
                )
            stacked = tensor.unsqueeze(0) if tensor.dim() == len(shape) else tensor  # (N, C, H, W)
            if tuple(stacked.shape[1:]) != shape or stacked.dim() != len(shape) + 1:
                raise ValueError(f"{file} has shape {tuple(tensor.shape)}: {_expected(tuple(tensor.shape), shape)}")
            if not stacked.is_floating_point():
                raise ValueError(f"{file} has dtype {stacked.dtype}: expected floating-point images")
            if (bad := (~stacked.isfinite()).flatten(1).any(dim=1).nonzero()).numel():
                raise ValueError(f"{file} has non-finite values in image {int(bad[0])}")
            images.append(stacked.float())
            single = tensor.dim() == len(shape)
            self.sources += [file.name] if single else [f"{file.name}[{i}]" for i in range(len(stacked))]
        self.images = torch.cat(images)  # (N, C, H, W) float32
        if not len(self.images):  # Lightning predicts over no batch, writes nothing and exits 0
            raise ValueError(f"predict_path {str(path)!r} holds 0 images: nothing to predict")

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Tensor:
        return self.images[index]  # (C, H, W)


def _expected(given: tuple[int, ...], shape: tuple[int, int, int]) -> str:
    """What a file of ``given`` shape should hold for images of ``shape``, with the fix where it is plain."""
    said = f"expected (C, H, W) = {shape} for one image, or (N, {', '.join(map(str, shape))}) for N images"
    if given[-2:] == shape[-2:] and len(given) in (2, 3) and shape[0] == 1:
        return f"{said}; the channel is missing: save images.unsqueeze(-3)"
    if len(given) in (3, 4) and given[-2:] == shape[-2:] and given[-3] != shape[0]:
        return f"{said}; these have {given[-3]} channels, the model takes {shape[0]}"
    return said


def _load(file: Path) -> Any:
    """``torch.load(file, weights_only=True)``, its refusal of a pickled object or a damaged file as one line."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:  # torch's message: ~10 lines, the refused global on one of them
        refused = re.search(r"(Unsupported global: GLOBAL [\w.]+|Unsupported operand \d+)", str(error))
        reason = refused[1] if refused else str(error).strip().splitlines()[-1]
        raise ValueError(
            f"{file}: torch.load(weights_only=True) refuses it: {reason}; save the tensor alone:"
            " torch.save(images, path)"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise ValueError(f"{file}: not a file torch.save wrote ({str(error).strip().splitlines()[0]})") from None


class PredictionWriter(BasePredictionWriter):
    """Writes what ``predict_step`` returns: ``predictions.pt`` (outputs, indices, sources) and ``predictions.csv``.

    Each ``predict`` writes into a new folder, ``<run directory>/predictions/<start time>/``, so earlier predictions
    are never overwritten; a folder named by ``output_dir`` is used only while empty. The CSV has a row per input:
    its ``index`` and ``source`` (the dataset's ``sources`` if it has them), then, for outputs of several values per
    input (e.g. class probabilities), ``argmax`` and ``max``, then every value (``output_0``, ...). Lightning's
    ``BasePredictionWriter`` leaves the writing to subclasses. Each process of a multi-process run writes its own
    share (``predictions.rank<r>.*``).
    """

    def __init__(self, output_dir: str | None = None) -> None:
        """Configures the writer.

        Args:
            output_dir: Folder of the files, new or empty; ``null`` means a new folder for each ``predict``,
                ``<run directory>/predictions/<start time>``.
        """
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # Before the first batch, so that a folder that cannot take the files stops the command (exit 2) at once.
        folder = location(self.output_dir) if self.output_dir is not None else self._parent(trainer)
        if self.output_dir is not None and folder.is_dir() and (held := sorted(p.name for p in folder.iterdir())):
            raise ValueError(
                f"output_dir: {folder} already holds {', '.join(held)}: give an empty or new folder, or null (a new"
                " folder under the run's predictions/)"
            )
        if isinstance(folder, StorePath):  # a store's folder: what it allows, its client says at the first write
            return
        existing = next(path for path in (folder, *folder.parents) if path.exists())
        if not existing.is_dir():
            raise ValueError(f"output_dir: {existing} is a file, not a folder")
        if reason := unwritable(existing):
            raise ValueError(f"output_dir: cannot write in {existing} ({reason})")

    def _parent(self, trainer: pl.Trainer) -> RunPath:
        return location(trainer.log_dir or ".") / "predictions"

    def _folder(self, trainer: pl.Trainer) -> RunPath:
        """The folder this command writes into, created now; one for all processes (rank 0 names it)."""
        if self.output_dir is not None:
            folder = location(self.output_dir)
            folder.mkdir(parents=True, exist_ok=True)
            return folder
        folder = new_folder(self._parent(trainer)) if trainer.is_global_zero else None
        return location(trainer.strategy.broadcast(str(folder)))

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
        folder = self._folder(trainer)
        stem = f"predictions.rank{trainer.global_rank}" if trainer.world_size > 1 else "predictions"
        saved = io.BytesIO()  # one write of each file: a store's objects appear whole
        torch.save({"outputs": outputs, "indices": torch.as_tensor(indices), "sources": names}, saved)
        (folder / f"{stem}.pt").write_bytes(saved.getvalue())
        values = outputs.reshape(len(outputs), -1)  # (N, K)
        header = ["index", "source", *(["argmax", "max"] if values.shape[1] > 1 else [])]
        table = io.StringIO(newline="")
        writer = csv.writer(table)
        writer.writerow([*header, *(f"output_{k}" for k in range(values.shape[1]))])
        for index, name, row in zip(indices, names, values.tolist(), strict=True):
            top = [max(range(len(row)), key=row.__getitem__), f"{max(row):.6g}"] if len(row) > 1 else []
            writer.writerow([index, name, *top, *(f"{value:.6g}" for value in row)])
        (folder / f"{stem}.csv").write_bytes(table.getvalue().encode())
        rank_zero_info(f"predictions: {folder}")


def new_folder(parent: RunPath) -> RunPath:
    """A new folder in ``parent`` named after the current time (``-2``, ``-3``, ... within the same second)."""
    parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime(FOLDER_TIME)
    for number in itertools.count(1):
        path = parent / (stamp if number == 1 else f"{stamp}-{number}")
        try:
            path.mkdir()  # atomic: two commands never share one
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")
