"""Export for inference: torch.export and ONNX files of the trained model, each checked against eager outputs.

Both take the model's inputs (``forward``'s tensors, batch first: one image batch, or token ids and an attention
mask; ``model_inputs.py``) with a dynamic batch size and return what ``forward`` returns (e.g. logits). ONNX needs
the optional ``export`` extra (onnx, onnxscript for torch's exporter, onnxruntime for the check).

An export is one folder, written whole: every file goes to a temporary folder next to it, is checked against
eager there, and the folder then takes the export folder's place (an earlier export in it is replaced as a whole).
A failed export leaves nothing behind, and never a file that did not pass its check. ``--quantize`` adds quantized
files and their report to the same folder (``quantized_export.py``), checked there before it is moved in.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from .model_inputs import ModelInputs, from_example, traceable
from .program_checks import load_program
from .quantized_export import WRITTEN as QUANTIZED_WRITTEN

FORMATS = ("torch_export", "onnx")
FILE_NAMES = {"torch_export": "model.pt2", "onnx": "model.onnx"}
# Every file an export writes (ONNX keeps its weights beside it), quantized ones included.
WRITTEN = {*FILE_NAMES.values(), "model.onnx.data", *QUANTIZED_WRITTEN}
ONNX_MODULES = ("onnx", "onnxscript", "onnxruntime")


@dataclass(frozen=True)
class Exported:
    """One exported file and how far its outputs are from the eager model's."""

    format: str
    path: Path
    max_abs_error: float


def check_formats(formats: Sequence[str]) -> None:
    """Raises ``ValueError`` for an unknown or unavailable format, before anything is written."""
    if not formats:
        raise ValueError(f"formats is empty: choose from {list(FORMATS)}")
    if unknown := [name for name in formats if name not in FORMATS]:
        raise ValueError(f"formats {unknown} unknown: choose from {list(FORMATS)}")
    if "onnx" in formats and (missing := [name for name in ONNX_MODULES if importlib.util.find_spec(name) is None]):
        raise ValueError(
            f"formats includes 'onnx' but {', '.join(missing)} is not installed: install the project's `export`"
            " extra (pip install -e '.[export]') or pass --formats '[torch_export]'"
        )


def export_dir(checkpoint: Path) -> Path:
    """``<run>/export`` for ``<run>/checkpoints/<name>.ckpt``; ``export`` next to a checkpoint found elsewhere."""
    folder = checkpoint.parent
    return (folder.parent if folder.name == "checkpoints" else folder) / "export"


def example_batch(
    model: pl.LightningModule, datamodule: pl.LightningDataModule | None, max_samples: int
) -> ModelInputs:
    """Inputs to trace and check with: up to ``max_samples`` samples of the first predict batches (their first
    element if tuples, the model's inputs by name if dicts), or the model's ``example_input_array`` (a tensor, a
    tuple or a dict of tensors) when the data has no ``predict_dataloader``.

    Raises:
        ValueError: Fewer than 2 samples, or inputs that are not tensors.
    """
    example = model.example_input_array
    if datamodule is not None and is_overridden("predict_dataloader", datamodule):
        datamodule.prepare_data()
        datamodule.setup("predict")
        parts, count = [], 0
        for batch in datamodule.predict_dataloader():  # a loader of batch size 1 still gives a batch of several
            if isinstance(batch, (tuple, list)) and not isinstance(example, (tuple, list)):
                batch = batch[0]  # (inputs, targets): the inputs (B, ...)
            elif isinstance(batch, dict) and isinstance(example, dict):
                batch = {name: batch[name] for name in example}
            part = from_example(batch, model)
            parts.append(part)
            count += len(part)
            if count >= max_samples:
                break
        if not parts:
            raise ValueError("the predict loader gave no batch: export needs at least 2 samples to trace")
        columns = zip(*(part.tensors for part in parts), strict=True)  # each input across the batches
        inputs = ModelInputs(parts[0].names, tuple(torch.cat(column) for column in columns), parts[0].keywords)
    else:
        inputs = from_example(example, model)
    if len(inputs) < 2:
        # torch.export specializes a dimension of size 0 or 1 to a constant: the batch would not stay dynamic.
        raise ValueError(f"the example input batch has {len(inputs)} sample(s): export needs at least 2")
    taken = inputs.rows(slice(0, max_samples))  # own storage: a program saves its sample inputs' whole storage
    return ModelInputs(taken.names, tuple(tensor.clone() for tensor in taken.tensors), taken.keywords)


def export_model(
    model: pl.LightningModule,
    inputs: ModelInputs,
    output_dir: Path,
    formats: Sequence[str],
    atol: float,
    then: Callable[[Mapping[str, Path]], object] | None = None,
) -> list[Exported]:
    """Writes ``model`` in each format, checks each reproduces ``model(inputs)`` within ``atol``, runs ``then`` on
    the checked files (format -> file; the quantized export), then puts the files in ``output_dir`` at once,
    replacing what an earlier export left there (see the module).

    Raises:
        RuntimeError: An exported file's outputs differ from eager by more than ``atol`` (nothing is written).
    """
    check_formats(formats)
    output_dir = output_dir.absolute()
    staging = output_dir.with_name(f".{output_dir.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)  # left by a process of this pid that was killed
    staging.mkdir(parents=True)
    try:
        exported = _export_checked(model, inputs, staging, formats, atol)
        if then is not None:
            then({item.format: item.path for item in exported})
        replace_folder(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [Exported(item.format, output_dir / item.path.name, item.max_abs_error) for item in exported]


def replace_folder(source: Path, target: Path) -> None:
    """Moves folder ``source`` to ``target``; a ``target`` that exists is moved aside first and removed after."""
    if not target.exists():
        os.rename(source, target)
        return
    aside = target.with_name(f".{target.name}.{os.getpid()}.replaced")
    os.rename(target, aside)
    try:
        os.rename(source, target)
    except BaseException:
        os.rename(aside, target)  # the earlier export stays as it was
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _export_checked(
    model: pl.LightningModule, inputs: ModelInputs, output_dir: Path, formats: Sequence[str], atol: float
) -> list[Exported]:
    """Writes ``model`` in each format into ``output_dir``, each file checked against the eager outputs."""
    model = model.cpu().eval()
    with torch.no_grad():
        expected = inputs.call(model)
    (traced, dynamic_shapes), args = traceable(model, inputs), inputs.tensors
    exported = []
    for name in formats:
        path = output_dir / FILE_NAMES[name]
        # Traced without autograd: an inference graph, with activation checkpointing (a training-only trick) off.
        with torch.no_grad():
            if name == "torch_export":
                torch.export.save(torch.export.export(traced, args, dynamic_shapes=dynamic_shapes), path)
            else:
                torch.onnx.export(
                    traced,
                    args,
                    path,
                    dynamo=True,
                    input_names=list(inputs.names),
                    output_names=["output"],
                    dynamic_shapes=dynamic_shapes,
                    verbose=False,
                )
        error = (run_exported(path, inputs) - expected).abs().max().item()
        if not error <= atol:  # also catches NaN
            raise RuntimeError(f"{path}: outputs differ from eager by {error:.3g} > atol={atol:g}")
        exported.append(Exported(name, path, error))
    return exported


def run_exported(path: Path, inputs: Tensor | ModelInputs) -> Tensor:
    """Runs an exported file (``.pt2`` with torch, ``.onnx`` with ONNX Runtime on CPU) on ``inputs``."""
    return load_program(path)(*(inputs.tensors if isinstance(inputs, ModelInputs) else (inputs,)))


def format_report(exported: Sequence[Exported]) -> str:
    """A small table: format, file, largest absolute difference from the eager model."""
    lines = [f"{'format':<13} {'max |diff| vs eager':>20}  file"]
    lines += [f"{item.format:<13} {item.max_abs_error:>20.3g}  {item.path}" for item in exported]
    return "\n".join(lines)
