"""``<package> export``: the subcommand's flags (this function's signature) and what it does, in order: check the
flags, read the checkpoint, export the float files, then (``--quantize``) the quantized ones.

The files themselves: ``export.py`` (float), ``quantized_export.py`` (quantized), ``program_checks.py`` (checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl

from ..bad_input import BadInputError
from ..command.task_checks import check_folder
from ..safety.checkpoints import read_checkpoint, resolve_ckpt_path
from ..store import is_remote
from .export import WRITTEN, Exported, check_formats, example_batch, export_dir, export_model, format_report
from .export_lock import ExportLock
from .program_checks import validation_batches
from .quantization_report import format_quantization
from .quantize import check_quantization
from .quantized_export import (
    INT8,
    BoundError,
    QuantizeOptions,
    check_quantized_formats,
    export_quantized,
)


def export(
    trainer: pl.Trainer,
    model: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    ckpt_path: str,
    output_dir: str | None = None,
    overwrite: bool = False,
    formats: tuple[Literal["torch_export", "onnx"], ...] = ("torch_export", "onnx"),
    atol: float = 1e-4,
    max_samples: int = 8,
    quantize: Literal["int8", "int8_weight_only", "int8_dynamic", "float8"] | None = None,
    quantize_device: Literal["cpu", "cuda"] = "cpu",
    max_accuracy_drop: float = 0.5,
    max_output_error: float = 0.05,
    latency_repeats: int = 30,
    latency_threads: int = 1,
    calibration_batches: int = 8,
) -> list[Exported]:
    """Exports the model for inference (torch.export ``model.pt2``, ONNX ``model.onnx``), checked against eager.

    With ``quantize int8``, also the int8 files of the paths that run fast on ``quantize_device`` and the float
    program compiled by AOTInductor (``model.aoti.pt2``); with a torchao mode, ``model.<mode>.pt2`` (and, for
    ``int8_dynamic``, ``model.int8_dynamic.onnx``). Each is checked on the validation set against the float model,
    timed against every float file, and reported in ``quantization.json`` beside them, with the file to ship.

    Args:
        trainer: The command's Trainer (where ``best``/``last`` are looked up).
        model: The model, built from the config; its weights come from ``ckpt_path``.
        datamodule: The data; its first predict batch (else the model's ``example_input_array``) is traced
            and used to compare outputs.
        ckpt_path: The weights to export: ``best``, ``last`` or a checkpoint file.
        output_dir: The export's folder, written whole (a failed export leaves none); ``null`` means the
            ``export`` folder of the run that wrote the checkpoint (next to its ``checkpoints`` folder).
        overwrite: Replace an earlier export in ``output_dir``, the whole folder; without it the folder is kept and
            the command stops. A folder holding files that no export writes is never replaced.
        formats: Any of ``torch_export`` and ``onnx`` (ONNX needs the project's ``export`` extra).
        atol: Largest absolute difference from the eager outputs that an exported file may show.
        max_samples: Samples of the first predict batch used to trace and compare (at least 2).
        quantize: ``int8``: the int8 files that run fast on ``quantize_device``, measured, the fastest within the
            bound recommended (or the fastest float file where none is faster); or a torchao mode
            (``int8_weight_only``, ``int8_dynamic``, ``float8``: a CUDA GPU of compute capability >= 8.9). Needs the
            ``export`` extra. ``null``: float files only.
        quantize_device: Where the quantized program is built, checked and timed (float8: ``cuda``).
        max_accuracy_drop: Most points of validation accuracy a quantized classifier may lose; more fails export.
        max_output_error: For a model that is not a classifier: the largest relative RMS difference of the quantized
            outputs from the float ones on the validation set; more fails the export.
        latency_repeats: Timed calls per program and batch size (1 and 64); the median and IQR are recorded.
        latency_threads: CPU threads of torch and ONNX Runtime while timing; 1 holds still on a machine shared with
            other work (two threads on two busy cores read 100x slower); 0: the libraries' defaults.
        calibration_batches: Validation batches that set the activation scales of ``int8``'s static paths.
    """
    if max_samples < 2:
        raise BadInputError(f"max_samples must be >= 2 (a batch of 1 would not stay dynamic), got {max_samples}")
    if not atol >= 0:
        raise BadInputError(f"atol must be >= 0, got {atol}")
    if not max_accuracy_drop >= 0 or not max_output_error >= 0:
        raise BadInputError(
            f"max_accuracy_drop and max_output_error must be >= 0, got {max_accuracy_drop}, {max_output_error}"
        )
    if latency_repeats < 1 or latency_threads < 0 or calibration_batches < 1:
        raise BadInputError(
            "latency_repeats and calibration_batches must be >= 1 and latency_threads >= 0, got"
            f" {latency_repeats}, {calibration_batches}, {latency_threads}"
        )
    check_formats(formats)
    then = None
    if quantize == INT8 and quantize_device == "cuda" and "torch_export" not in formats:
        raise BadInputError("quantize: int8 on cuda compiles torch_export programs: add torch_export to --formats")
    if quantize is not None:
        try:
            check_quantization(quantize, quantize_device)
            check_quantized_formats(quantize, formats)
            batches = validation_batches(model, datamodule)
        except ValueError as error:
            raise BadInputError(str(error)) from None
    path = resolve_ckpt_path(ckpt_path, trainer.default_root_dir)  # the CLI made `best`/`last` a file already
    if is_remote(output_dir) or (output_dir is None and is_remote(path)):  # its files go through local paths
        raise BadInputError(
            f"output_dir: export writes a local folder, and {output_dir or path} is in a store: give --output_dir a"
            " local folder (the checkpoint is read from the store)"
        )
    destination = Path(output_dir) if output_dir is not None else export_dir(Path(path))
    check_export_dir(destination, overwrite)
    with ExportLock(destination):  # a second export into this folder is refused until this one ends
        model.load_state_dict(read_checkpoint(path)["state_dict"])
        try:
            inputs = example_batch(model, datamodule, max_samples)
        except (ValueError, TypeError) as error:
            raise BadInputError(f"export: {error}") from None
        reports: list[dict[str, Any]] = []
        if quantize is not None:
            options = QuantizeOptions(
                quantize,
                quantize_device,
                max_accuracy_drop,
                max_output_error,
                latency_repeats,
                latency_threads,
                calibration_batches,
            )
            project = {type(part).__module__.partition(".")[0] for part in (model, datamodule) if part is not None}

            def then(floats: dict[str, Path]) -> None:
                reports.append(export_quantized(model, inputs, floats, batches, options, project - {"torch"}, atol))

        try:
            exported = export_model(model, inputs, destination, formats, atol, then)
        except BoundError as error:  # the flag's bound: one line with both numbers, nothing written
            flag = "max_accuracy_drop" if "accuracy" in str(error) else "max_output_error"
            raise BadInputError(f"{flag}: {error}; the export was not written") from None
    print(format_report(exported))
    if reports:
        print(format_quantization(reports[0]))  # its last line: the file to ship, and why
    return exported


def check_export_dir(destination: Path, overwrite: bool) -> None:
    """Raises ``BadInputError`` naming ``output_dir`` unless ``export`` may put its folder at ``destination``: a folder
    it can create (or replace), empty, or with ``overwrite`` holding an earlier export and nothing else."""
    if destination.exists() and not destination.is_dir():
        raise BadInputError(f"output_dir: {destination} is a file, not a folder")
    check_folder("output_dir", destination.absolute().parent)  # the export is staged next to it, then moved in
    if destination.is_dir():
        check_folder("output_dir", destination)
    held = sorted(path.name for path in destination.iterdir()) if destination.is_dir() else []
    if held and not overwrite:
        source = " from an earlier export" if set(held) <= WRITTEN else ""
        raise BadInputError(
            f"output_dir: {destination} already holds {', '.join(held)}{source}: pass --overwrite true to replace"
            " them, or another --output_dir"
        )
    if foreign := [name for name in held if name not in WRITTEN]:
        raise BadInputError(
            f"output_dir: {destination} holds {', '.join(foreign)}, which no export writes: --overwrite true replaces"
            " the whole folder; choose another --output_dir"
        )
