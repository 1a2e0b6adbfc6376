"""Quantized export: float and each int8 path, timed in a fresh process without the project (``python -I``: torch
and ONNX Runtime only), every file taking turns call by call, at batch 1 and 64, with one thread and all cores.

    # every path on the default ConvNet, the transformer preset and the 3.2M transformer (random weights: latency
    # and size do not depend on them; accuracy is each export's quantization.json)
    BENCH_PROJECT=build/image-classifier python runkit/bench/quantized_export.py paths
    # the issue's proof: an export's recommended file against its fastest float file, one thread, batch 64
    python runkit/bench/quantized_export.py proof runs/<experiment>/<run>/export

Prints a Markdown table (docs/predict-export.md) and writes the rows as JSON beside the files (``--workdir``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

# Run by ``python -I``: argv = JSON {files, batch_size, threads, repeats, shape}; prints {file: [ms, ...]}.
TIMER = """
import json, sys, time, zipfile
import torch
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
inputs = torch.randn(spec["batch_size"], *spec["shape"])
calls = {}
for path in spec["files"]:
    if path.endswith(".onnx"):
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = spec["threads"]
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        calls[path] = lambda session=session, name=name: session.run(None, {name: inputs.numpy()})
    elif any("/data/aotinductor/" in item for item in zipfile.ZipFile(path).namelist()):
        import torch._inductor
        runner = torch._inductor.aoti_load_package(path)
        calls[path] = lambda runner=runner: runner(inputs)
    else:
        module = torch.export.load(path).module()
        calls[path] = lambda module=module: module(inputs)
times = {path: [] for path in calls}
with torch.no_grad():
    for index in range(spec["repeats"] + 3):
        for path, call in calls.items():
            start = time.perf_counter()
            call()
            if index >= 3:
                times[path].append(1e3 * (time.perf_counter() - start))
print(json.dumps(times))
"""

MODELS = {  # name -> TransformerClassifier/ConvNet arguments of the baked project's task/networks.py
    "ConvNet (default)": ("ConvNet", {}),
    "transformer preset": ("TransformerClassifier", {"dim": 64, "depth": 3, "heads": 4, "mlp_ratio": 2.0}),
    "transformer 3.2M": ("TransformerClassifier", {"dim": 256, "depth": 4, "heads": 4, "mlp_ratio": 4.0}),
}
SHAPE = (1, 28, 28)


def fresh_times(files: list[Path], batch_size: int, threads: int, repeats: int) -> dict[str, float]:
    """Median milliseconds per file, timed in turns in one fresh ``python -I`` process."""
    spec = {"files": [str(p) for p in files], "batch_size": batch_size, "threads": threads, "repeats": repeats}
    spec["shape"] = list(SHAPE)
    done = subprocess.run(
        [sys.executable, "-I", "-c", TIMER, json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"error: the timing process failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    times = json.loads(done.stdout.strip().splitlines()[-1])
    return {Path(path).name: sorted(taken)[len(taken) // 2] for path, taken in times.items()}


def whole_bytes(path: Path) -> int:
    data = path.with_name(f"{path.name}.data")
    return path.stat().st_size + (data.stat().st_size if data.is_file() else 0)


def build_paths(model: torch.nn.Module, folder: Path) -> dict[str, str]:
    """The float files and each int8 path's file of ``model`` in ``folder``; file -> runtime's format name."""
    from runkit.tools import int8_paths
    from runkit.tools.export import export_model
    from runkit.tools.model_inputs import ModelInputs

    generator = torch.Generator().manual_seed(0)
    inputs = ModelInputs(("input",), (torch.randn(8, *SHAPE, generator=generator),))
    calibration = [ModelInputs(("input",), (torch.randn(64, *SHAPE, generator=generator),)) for _ in range(4)]
    export_model(model, inputs, folder, ("torch_export", "onnx"), 1e-4)
    source = int8_paths.Source(model, inputs, folder / "model.onnx", calibration)
    for build, name in (
        (int8_paths.float_aoti, "model.aoti.pt2"),
        (int8_paths.onnx_dynamic, "model.int8_dynamic.onnx"),
        (int8_paths.onnx_static, "model.int8_static.onnx"),
        (int8_paths.pt2e_aoti, "model.int8.aoti.pt2"),
    ):
        build(source, folder / name)
    return {
        "model.pt2": "float",
        "model.onnx": "float",
        "model.aoti.pt2": "float",
        "model.int8_dynamic.onnx": "model.onnx",
        "model.int8_static.onnx": "model.onnx",
        "model.int8.aoti.pt2": "model.aoti.pt2",
    }


def paths(workdir: Path, repeats: int, models: list[str]) -> list[dict[str, Any]]:
    sys.path.insert(0, str(Path(os.environ.get("BENCH_PROJECT", "build/image-classifier")) / "src"))
    from common import project

    networks = project("task.networks")
    rows = []
    for label in models:
        kind, arguments = MODELS[label]
        torch.manual_seed(0)
        model = getattr(networks, kind)(**arguments).eval()
        folder = workdir / label.replace(" ", "_").replace("(", "").replace(")", "")
        made = build_paths(model, folder)
        files = [folder / name for name in made]
        for threads in (1, os.cpu_count() or 1):
            for size in (1, 64):
                medians = fresh_times(files, size, threads, repeats)
                fastest = min(medians[name] for name, kind_ in made.items() if kind_ == "float")
                for name, of in made.items():
                    size_ratio = None if of == "float" else whole_bytes(folder / name) / whole_bytes(folder / of)
                    rows.append(
                        {
                            "model": label,
                            "parameters": sum(p.numel() for p in model.parameters()),
                            "file": name,
                            "threads": threads,
                            "batch_size": size,
                            "median_ms": medians[name],
                            "ratio_to_fastest_float": medians[name] / fastest,
                            "bytes": whole_bytes(folder / name),
                            "size_ratio_to_float_of_format": size_ratio,
                            "load_average": os.getloadavg()[0],
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def proof(export_dir: Path, repeats: int) -> dict[str, Any]:
    """The recommended file against the fastest float file at batch 64 (quantization.json's), one thread, in turns
    in a fresh process; the file ratio against the float file of its format; the accuracy it states."""
    report = json.loads((export_dir / "quantization.json").read_text())
    chosen = report["recommended"]["file"]
    floats = {name: entry for name, entry in report["files"].items() if entry["precision"] == "float"}
    fastest = min(
        floats, key=lambda name: next(r["median_ms"] for r in floats[name]["latency"] if r["batch_size"] == 64)
    )
    load_before = os.getloadavg()[0]
    medians = fresh_times([export_dir / chosen, export_dir / fastest], 64, 1, repeats)
    entry = report["files"][chosen]
    result = {
        "recommended": chosen,
        "fastest_float": fastest,
        "median_ms": medians,
        "latency_ratio": medians[chosen] / medians[fastest],
        "file_ratio": entry.get("file_ratio"),
        "float_file_of_its_format": entry.get("float_file"),
        "score": entry.get("score"),
        "points_lost": (entry["score"]["float_value"] - entry["score"]["quantized_value"])
        if "score" in entry
        else None,
        "load_average": [load_before, os.getloadavg()[0]],
        "repeats": repeats,
    }
    print(json.dumps(result, indent=2))
    return result


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: a row per model and file; columns per (threads, batch) with median ms and the ratio."""
    keys = sorted({(row["threads"], row["batch_size"]) for row in rows})
    head = "| model, file | size (ratio to float of its format) | " + " | ".join(
        f"{threads} thread{'s' if threads > 1 else ''}, batch {size}" for threads, size in keys
    )
    lines = [head + " |", "|---|---|" + "---|" * len(keys)]
    for model, file in dict.fromkeys((row["model"], row["file"]) for row in rows):
        mine = {
            (row["threads"], row["batch_size"]): row for row in rows if (row["model"], row["file"]) == (model, file)
        }
        first = next(iter(mine.values()))
        size = f"{first['bytes']:,} B" + (
            f" ({first['size_ratio_to_float_of_format']:.2f}x)" if first["size_ratio_to_float_of_format"] else ""
        )
        cells = [f"{mine[key]['median_ms']:.3g} ms ({mine[key]['ratio_to_fastest_float']:.2f}x)" for key in keys]
        lines.append(f"| {model}, `{file}` | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["paths", "proof"])
    parser.add_argument("export_dir", nargs="?", type=Path, help="proof: the export's folder")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--models", default=",".join(MODELS), help="paths: comma-separated names of MODELS")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    if args.mode == "proof":
        if args.export_dir is None or not (args.export_dir / "quantization.json").is_file():
            parser.error("proof needs an export folder holding quantization.json (export --quantize int8)")
        proof(args.export_dir, args.repeats)
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="quantized-export-"))
    rows = paths(workdir, args.repeats, args.models.split(","))
    (workdir / "rows.json").write_text(json.dumps(rows, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
