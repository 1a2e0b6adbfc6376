"""Quantized export: the model quantized by torchao (``quantize.py``) as a ``torch.export`` program, and the float
ONNX model through ONNX Runtime's dynamic int8 quantizer, written beside the float files and checked, not assumed:

1. on the validation set it scores within a bound of the float model: at most ``max_accuracy_drop`` points of
   accuracy lost for a classifier, else a relative RMS error of the outputs of at most ``max_output_error``;
   outside it the export fails with both numbers (and, being written whole, leaves nothing);
2. it runs in a fresh process that cannot import the project, runkit or Lightning, with the same outputs;
3. its weights' bytes, its file's bytes and its latency (median and interquartile range at batch 1 and 64) against
   the float export, printed and recorded in ``quantization.json`` beside the files.
"""

from __future__ import annotations

import copy
import json
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from .program_checks import Latency, Program, Score, check_fresh_process, latencies, load_program, score
from .quantize import MODES, Quantized, quantize_model, tensor_bytes

REPORT = "quantization.json"
ONNX_MODE = "int8_dynamic"  # ONNX Runtime's dynamic quantizer: int8 weights, activations quantized per batch
LATENCY_BATCHES = (1, 64)
NOT_NEEDED = ("runkit", "lightning", "pytorch_lightning")  # a served program imports torch (and torchao) only
WRITTEN = {REPORT, f"model.{ONNX_MODE}.onnx", *(f"model.{mode}.pt2" for mode in MODES)}


@dataclass(frozen=True)
class QuantizeOptions:
    """What ``export --quantize`` was asked for (see ``ProjectTrainer.export`` for each)."""

    mode: str
    device: str = "cpu"
    max_accuracy_drop: float = 0.5
    max_output_error: float = 0.05
    latency_repeats: int = 30
    latency_threads: int = 1


def check_quantized_formats(mode: str, formats: Iterable[str]) -> None:
    """Raises ``ValueError`` where no requested format gets ``mode``: ONNX is quantized by int8_dynamic only."""
    if "torch_export" not in formats and mode != ONNX_MODE:
        raise ValueError(
            f"quantize: {mode} quantizes torch_export programs; ONNX Runtime's quantizer is {ONNX_MODE} only: add"
            " torch_export to --formats"
        )


def export_quantized(
    model: nn.Module,
    inputs: Tensor,
    floats: Mapping[str, Path],
    batches: Iterable[object],
    options: QuantizeOptions,
    blocked: Iterable[str],
    atol: float,
) -> dict[str, object]:
    """Writes the quantized files next to the float ones (``floats``: format -> checked float file), checks each,
    writes ``quantization.json`` there and returns what it holds.

    Raises:
        RuntimeError: A quantized file fails a check, or scores outside the bound (both numbers in the message).
    """
    folder = next(iter(floats.values())).parent
    device, blocked = options.device, sorted({*blocked, *NOT_NEEDED})
    files: dict[str, dict[str, object]] = {}
    quantized = None
    if "torch_export" in floats:
        quantized = quantize_model(model.to(device), options.mode)
        path = folder / f"model.{options.mode}.pt2"
        _export(quantized.module, inputs.to(device), path)
        files["torch_export"] = {"file": path, "float_file": floats["torch_export"]}
    if "onnx" in floats and options.mode == ONNX_MODE:
        from onnxruntime.quantization import QuantType, quantize_dynamic  # optional: the `export` extra

        path = folder / f"model.{ONNX_MODE}.onnx"
        quantize_dynamic(floats["onnx"], path, weight_type=QuantType.QInt8)
        files["onnx"] = {"file": path, "float_file": floats["onnx"]}
    model = model.cpu().eval()
    for name, entry in files.items():
        path, float_path = entry["file"], entry["float_file"]
        on = device if name == "torch_export" else "cpu"
        program = load_program(path, on)
        checked = score(model, program, batches)
        _check_bound(path, checked, options)
        entry["fresh_process_max_abs_diff"] = check_fresh_process(path, inputs, on, blocked, atol)
        entry["score"] = asdict(checked)
        entry["weights_bytes"], entry["float_weights_bytes"] = _weights_bytes(path), _weights_bytes(float_path)
        entry["file_bytes"], entry["float_file_bytes"] = _file_bytes(path), _file_bytes(float_path)
        threads = options.latency_threads
        # On a GPU the float reference is the eager model there (the float file was exported on the CPU).
        reference = load_program(float_path, on, threads) if on == "cpu" else _eager(copy.deepcopy(model).to(on))
        programs = {"float": reference, "quantized": load_program(path, on, threads)}
        entry["latency"] = [
            {"program": label, **asdict(timed)}
            for size in LATENCY_BATCHES
            for label, timed in latencies(programs, inputs, size, options.latency_repeats, on, threads).items()
        ]
        entry["file"], entry["float_file"] = path.name, float_path.name
    report = _report(options, quantized, files)
    (folder / REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _export(module: nn.Module, inputs: Tensor, path: Path) -> None:
    batch = torch.export.Dim("batch")
    with torch.no_grad():
        torch.export.save(torch.export.export(module, (inputs,), dynamic_shapes=({0: batch},)), path)


def _eager(model: nn.Module) -> Program:
    def run(inputs: Tensor) -> Tensor:
        with torch.no_grad():
            return model(inputs)

    return run


def _check_bound(path: Path, checked: Score, options: QuantizeOptions) -> None:
    if checked.metric == "accuracy":
        lost = checked.float_value - checked.quantized_value
        if not lost <= options.max_accuracy_drop:
            raise RuntimeError(
                f"{path.name}: validation accuracy {checked.quantized_value:.2f}% against {checked.float_value:.2f}%"
                f" float: {lost:.2f} points lost > max_accuracy_drop={options.max_accuracy_drop:g}"
            )
    elif not checked.quantized_value <= options.max_output_error:
        raise RuntimeError(
            f"{path.name}: outputs on the validation set differ from the float model's by a relative RMS error of"
            f" {checked.quantized_value:.3g} > max_output_error={options.max_output_error:g}"
        )


def _weights_bytes(path: Path) -> int:
    """Bytes of the tensors a file stores: a program's parameters, buffers and constants; an ONNX initializers."""
    if path.suffix == ".pt2":
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


def _report(options: QuantizeOptions, quantized: Quantized | None, files: dict[str, dict[str, object]]) -> dict:
    return {
        "mode": options.mode,
        "device": options.device,
        "bound": {"max_accuracy_drop": options.max_accuracy_drop, "max_output_error": options.max_output_error},
        "quantized_layers": quantized.layers if quantized else {},
        "kept_float": quantized.kept_float if quantized else {},
        "files": files,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if options.device == "cuda" else None,
        },
        "latency_repeats": options.latency_repeats,
        "latency_threads": options.latency_threads or torch.get_num_threads(),
    }


def format_quantization(report: Mapping[str, object]) -> str:
    """What ``quantization.json`` holds, in lines: per file the score, the sizes, the latency; the float layers."""
    lines = [
        f"quantized {report['mode']} on {report['device']} ({len(report['quantized_layers'])} layers); latency over"
        f" {report['latency_repeats']} calls, {report['latency_threads']} thread(s):"
    ]
    for name, entry in report["files"].items():
        checked = Score(**entry["score"])
        if checked.metric == "accuracy":
            result = f"val accuracy {checked.quantized_value:.2f}% (float {checked.float_value:.2f}%)"
        else:
            result = f"relative RMS error {checked.quantized_value:.3g} against float on the validation set"
        weights = entry["float_weights_bytes"] / max(entry["weights_bytes"], 1)
        whole = entry["float_file_bytes"] / max(entry["file_bytes"], 1)
        lines.append(
            f"  {name}: {entry['file']}: {result}; weights {entry['weights_bytes']:,} B (float/quantized"
            f" {weights:.2f}x), file {entry['file_bytes']:,} B (float/quantized {whole:.2f}x)"
        )
        for row in entry["latency"]:
            timed = Latency(**{key: value for key, value in row.items() if key != "program"})
            lines.append(
                f"    batch {timed.batch_size:>2} {row['program']:<9} {timed.median_ms:8.3f} ms"
                f" (IQR {timed.q1_ms:.3f}-{timed.q3_ms:.3f})"
            )
    kept = report["kept_float"]
    lines += [f"  kept float: {name}: {why}" for name, why in kept.items()] if kept else ["  kept float: none"]
    return "\n".join(lines)
