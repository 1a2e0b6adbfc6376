"""Quantized export: int8 files written beside the float ones, each checked, timed against every float file, and
one of them recommended, not assumed:

- ``--quantize int8``: the int8 paths that run fast on the target device (``int8_paths.py``), and the float program
  compiled ahead of time (``model.aoti.pt2``), a float candidate like ``model.pt2`` and ``model.onnx``;
- ``--quantize int8_dynamic|int8_weight_only|float8``: torchao's mode as a ``torch.export`` program (``quantize.py``),
  and for int8_dynamic ONNX Runtime's dynamic int8 model.

Each int8 file:

1. scores on the validation set within a bound of the float model: at most ``max_accuracy_drop`` points of accuracy
   lost for a classifier, else a relative RMS error of the outputs of at most ``max_output_error``;
2. runs in a fresh process that cannot import the project, runkit or Lightning, with the same outputs;
3. is weighed whole (external data included) against the float file of its format, and timed at batch 1 and 64
   with every float file, all taking turns call by call.

An explicitly asked mode outside the bound fails the export with both numbers (``BoundError``). Under ``int8`` a
candidate that fails a check is removed and named with the reason: the others are still measured. The recommendation
(``recommendation.py``) and every number go into ``quantization.json`` beside the files.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import int8_paths
from .model_inputs import ModelInputs, batch_inputs, traceable
from .program_checks import Score, check_fresh_process, latencies, load_program, runtime, score
from .quantization_report import build_report
from .quantize import MODES, quantize_model, tensor_bytes
from .recommendation import latency_ratios

REPORT = "quantization.json"
INT8 = "int8"  # measured: the int8 paths of the device
ONNX_MODE = "int8_dynamic"  # ONNX Runtime's dynamic quantizer: int8 weights, activations quantized per batch
FLOAT_AOTI = "model.aoti.pt2"
INT8_FILES = {  # path -> file
    "onnx_dynamic": f"model.{ONNX_MODE}.onnx",
    "onnx_static": "model.int8_static.onnx",
    "pt2e_aoti": "model.int8.aoti.pt2",
    "torchao_aoti": "model.int8_torchao.aoti.pt2",
}
METHODS = {
    "onnx_dynamic": "ONNX Runtime dynamic int8 (MatMul, Gemm)",
    "onnx_static": "ONNX Runtime static int8, QDQ, calibrated on validation batches",
    "pt2e_aoti": "PT2E X86InductorQuantizer, calibrated on validation batches; AOTInductor",
    "torchao_aoti": "torchao Int8DynamicActivationInt8WeightConfig; AOTInductor",
}
LATENCY_BATCHES = (1, 64)
NOT_NEEDED = ("runkit", "lightning", "pytorch_lightning")  # a served program imports torch (and torchao) only
WRITTEN = {REPORT, FLOAT_AOTI, *INT8_FILES.values(), *(f"model.{mode}.pt2" for mode in MODES)}


@dataclass(frozen=True)
class QuantizeOptions:
    """What ``export --quantize`` was asked for (see ``export_command.export`` for each)."""

    mode: str
    device: str = "cpu"
    max_accuracy_drop: float = 0.5
    max_output_error: float = 0.05
    latency_repeats: int = 30
    latency_threads: int = 1
    calibration_batches: int = 8


class BoundError(ValueError):
    """A quantized file scores outside the bound on the validation set; the message has both numbers."""


@dataclass(frozen=True)
class Candidate:
    """A file to check and time: float, or int8 with the float file of its format."""

    path: Path
    precision: str
    float_path: Path | None = None
    method: str = ""


def check_quantized_formats(mode: str, formats: Iterable[str]) -> None:
    """Raises ``ValueError`` where no requested format gets ``mode``: ONNX is quantized by int8_dynamic only."""
    if "torch_export" not in formats and mode not in (ONNX_MODE, INT8):
        raise ValueError(
            f"quantize: {mode} quantizes torch_export programs; ONNX Runtime's quantizer is {ONNX_MODE} only: add"
            " torch_export to --formats"
        )


def export_quantized(
    model: nn.Module,
    inputs: ModelInputs,
    floats: Mapping[str, Path],
    batches: Iterable[object],
    options: QuantizeOptions,
    blocked: Iterable[str],
    atol: float,
) -> dict[str, Any]:
    """Writes the quantized files next to the float ones (``floats``: format -> checked float file), checks and
    times each, writes ``quantization.json`` there and returns what it holds.

    Raises:
        BoundError: An explicitly asked mode scores outside the bound (both numbers in the message).
        RuntimeError: An explicitly asked mode's file fails a check.
    """
    folder = next(iter(floats.values())).parent
    model = model.cpu().eval()
    rejected: dict[str, str] = {}
    built, layers = _build(model, inputs, floats, batches, options, folder, rejected)
    files: dict[str, dict[str, Any]] = {}
    blocked = sorted({*blocked, *NOT_NEEDED})
    on = options.device
    for candidate in built:
        entry = {"runtime": runtime(candidate.path), "precision": candidate.precision, "method": candidate.method}
        entry["file_bytes"], entry["weights_bytes"] = _file_bytes(candidate.path), _weights_bytes(candidate.path)
        if candidate.float_path is not None:
            try:
                program = load_program(candidate.path, _device(candidate.path, on))
                checked = score(model, program, batches, inputs)
                _check_bound(candidate.path, checked, options)
                device = _device(candidate.path, on)
                entry["fresh_process_max_abs_diff"] = check_fresh_process(candidate.path, inputs, device, blocked, atol)
            except (BoundError, RuntimeError) as error:
                if options.mode != INT8:
                    raise
                said = str(error).removeprefix(f"{candidate.path}: ").removeprefix(f"{candidate.path.name}: ")
                rejected[candidate.path.name] = said
                candidate.path.unlink()
                continue
            entry["score"] = asdict(checked)
            entry["float_file"] = candidate.float_path.name
            entry["float_file_bytes"] = _file_bytes(candidate.float_path)
            entry["float_weights_bytes"] = _weights_bytes(candidate.float_path)
            entry["file_ratio"] = round(entry["file_bytes"] / max(entry["float_file_bytes"], 1), 4)
        files[candidate.path.name] = entry
    _time(files, folder, inputs, options)
    for name, by_size in latency_ratios(files).items():
        files[name]["latency_ratio"] = {str(size): round(ratio, 4) for size, ratio in by_size.items()}
    report = build_report(options, layers, files, rejected)
    (folder / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _build(
    model: nn.Module,
    inputs: ModelInputs,
    floats: Mapping[str, Path],
    batches: Iterable[object],
    options: QuantizeOptions,
    folder: Path,
    rejected: dict[str, str],
) -> tuple[list[Candidate], dict[str, dict[str, str]]]:
    """Writes the candidate files of ``options.mode``; returns them, float ones first, and torchao's layers."""
    on = options.device
    usable = {name: path for name, path in floats.items() if on == "cpu" or name == "torch_export"}
    built = [Candidate(path, "float") for path in usable.values()]  # ONNX Runtime runs here on the CPU only
    layers: dict[str, dict[str, str]] = {"quantized_layers": {}, "kept_float": {}}
    if options.mode != INT8:
        quantized = quantize_model(copy.deepcopy(model).to(on), options.mode)
        layers = {"quantized_layers": quantized.layers, "kept_float": quantized.kept_float}
        if "torch_export" in floats:
            path = folder / f"model.{options.mode}.pt2"
            traced = inputs.to(on)
            module, dynamic_shapes = traceable(quantized.module, traced)
            with torch.no_grad():
                program = torch.export.export(module, traced.tensors, dynamic_shapes=dynamic_shapes)
            torch.export.save(program, path)
            built.append(Candidate(path, options.mode, floats["torch_export"], f"torchao {options.mode}"))
        if "onnx" in floats and options.mode == ONNX_MODE:
            path = folder / INT8_FILES["onnx_dynamic"]
            int8_paths.onnx_dynamic(int8_paths.Source(model, inputs, floats["onnx"], []), path)
            built.append(Candidate(path, "int8", floats["onnx"], METHODS["onnx_dynamic"]))
        return built, layers
    calibration = [batch_inputs(batch, inputs)[0] for batch in itertools.islice(batches, options.calibration_batches)]
    source = int8_paths.Source(copy.deepcopy(model).to(on), inputs.to(on), floats.get("onnx"), calibration)
    aoti = folder / FLOAT_AOTI
    if _attempt(aoti, rejected, int8_paths.float_aoti, source):
        built.append(Candidate(aoti, "float", method="AOTInductor, float32"))
    reference = aoti if aoti.is_file() else floats.get("torch_export")  # the float file of the AOTI format
    for name in ("onnx_dynamic", "onnx_static", "pt2e_aoti") if on == "cpu" else ("torchao_aoti",):
        float_path = floats.get("onnx") if name.startswith("onnx") else reference
        path = folder / INT8_FILES[name]
        if float_path is not None and _attempt(path, rejected, getattr(int8_paths, name), source):
            built.append(Candidate(path, "int8", float_path, METHODS[name]))
    return built, layers


def _attempt(path: Path, rejected: dict[str, str], build: Any, source: int8_paths.Source) -> bool:
    """Runs ``build(source, path)``; a failure (no C++ compiler for AOTInductor, an operator a quantizer does not
    take) removes the file and names it in ``rejected`` with its first line."""
    try:
        build(source, path)
    except Exception as error:  # whatever the compiler or quantizer raises: the candidate is out, the others stay
        path.unlink(missing_ok=True)
        first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
        rejected[path.name] = f"could not be built: {type(error).__name__}: {first[:300]}"
        return False
    return True


def _device(path: Path, device: str) -> str:
    return "cpu" if path.suffix == ".onnx" else device


def _time(files: dict[str, dict[str, Any]], folder: Path, inputs: ModelInputs, options: QuantizeOptions) -> None:
    """Every file at each batch size, all taking turns call by call: ``latency`` rows in each entry."""
    threads = options.latency_threads
    programs = {name: load_program(folder / name, _device(folder / name, options.device), threads) for name in files}
    sample = inputs.to(options.device)
    for entry in files.values():
        entry["latency"] = []
    for size in LATENCY_BATCHES:
        timed = latencies(programs, sample, size, options.latency_repeats, options.device, threads)
        for name, latency in timed.items():
            files[name]["latency"].append(asdict(latency))


def _check_bound(path: Path, checked: Score, options: QuantizeOptions) -> None:
    if checked.metric == "accuracy":
        lost = checked.float_value - checked.quantized_value
        if not lost <= options.max_accuracy_drop:
            raise BoundError(
                f"{path.name}: validation accuracy {checked.quantized_value:.2f}% against {checked.float_value:.2f}%"
                f" float: {lost:.2f} points lost > max_accuracy_drop={options.max_accuracy_drop:g}"
            )
    elif not checked.quantized_value <= options.max_output_error:
        raise BoundError(
            f"{path.name}: outputs on the validation set differ from the float model's by a relative RMS error of"
            f" {checked.quantized_value:.3g} > max_output_error={options.max_output_error:g}"
        )


def _weights_bytes(path: Path) -> int | None:
    """Bytes of the tensors a file stores: a program's parameters, buffers and constants; an ONNX initializers.
    ``None`` for an AOTInductor package (its constants are inside its compiled library)."""
    if path.suffix == ".pt2":
        if runtime(path) == "aoti":
            return None
        program = torch.export.load(path)
        return tensor_bytes({**program.state_dict, **program.constants})
    import onnx
    from onnx import numpy_helper

    return sum(
        numpy_helper.to_array(tensor, base_dir=str(path.parent)).nbytes for tensor in onnx.load(path).graph.initializer
    )


def _file_bytes(path: Path) -> int:
    data = path.with_name(f"{path.name}.data")  # ONNX keeps large weights beside the model
    return path.stat().st_size + (data.stat().st_size if data.is_file() else 0)
