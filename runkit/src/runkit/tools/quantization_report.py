"""``quantization.json``: what a quantized export measured, the machine it ran on, the file it recommends; and the
lines the export prints from it (the last one: which file to ship, and why)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Protocol

import torch

from .program_checks import Latency, Score
from .recommendation import recommend


class Asked(Protocol):
    """What the export was asked for (``quantized_export.QuantizeOptions``)."""

    mode: str
    device: str
    max_accuracy_drop: float
    max_output_error: float
    latency_repeats: int
    latency_threads: int


def build_report(
    options: Asked,
    layers: dict[str, dict[str, str]],
    files: dict[str, dict[str, Any]],
    rejected: dict[str, str],
) -> dict[str, Any]:
    """What ``quantization.json`` holds: the bound, the recommendation, torchao's layers, each file's entry, the files
    left out and why, the machine and its load, how latency was timed."""
    return {
        "mode": options.mode,
        "device": options.device,
        "bound": {"max_accuracy_drop": options.max_accuracy_drop, "max_output_error": options.max_output_error},
        "recommended": recommend(files),
        **layers,
        "files": files,
        "rejected": rejected,
        "machine": {
            "cpu": _cpu_name(),
            "cores": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if options.device == "cuda" else None,
        },
        "latency_repeats": options.latency_repeats,
        "latency_threads": options.latency_threads or torch.get_num_threads(),
    }


def _cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def format_quantization(report: dict[str, Any]) -> str:
    """What ``quantization.json`` holds, in lines: per file the score, the sizes, the latency; the files left out;
    the float layers; last, the file to ship and why."""
    lines = [
        f"quantized {report['mode']} on {report['device']}; latency over {report['latency_repeats']} calls,"
        f" {report['latency_threads']} thread(s), load average {report['machine']['load_average'][0]:.1f}:"
    ]
    for name, entry in report["files"].items():
        text = f"  {name} ({entry['runtime']}, {entry['precision']}): {entry['file_bytes']:,} B"
        if "score" in entry:
            checked = Score(**entry["score"])
            if checked.metric == "accuracy":
                result = f"val accuracy {checked.quantized_value:.2f}% (float {checked.float_value:.2f}%)"
            else:
                result = f"relative RMS error {checked.quantized_value:.3g} against float on the validation set"
            text += f" ({entry['file_ratio']:.2f}x {entry['float_file']}); {result}"
        lines.append(text)
        for row in entry["latency"]:
            timed = Latency(**row)
            ratio = entry["latency_ratio"][str(timed.batch_size)]
            lines.append(
                f"    batch {timed.batch_size:>2} {timed.median_ms:9.3f} ms (IQR {timed.q1_ms:.3f}-{timed.q3_ms:.3f})"
                f" {ratio:.2f}x the fastest float"
            )
    lines += [f"  left out: {name}: {why}" for name, why in report["rejected"].items()]
    lines += [f"  kept float: {name}: {why}" for name, why in report["kept_float"].items()]
    lines.append(f"recommended: {report['recommended']['why']}")
    return "\n".join(lines)
