"""Checks of an exported program away from the model that made it: it runs in a fresh Python process that cannot
import the project (nor runkit), it scores on the validation set close to the float model, and how long it takes.

A program is a callable from the model's input tensors ``(B, ...)`` (``model_inputs.py``) to what ``forward``
returns, loaded from its file: ``torch.export.load`` for a ``.pt2`` program, ``aoti_load_package`` for a ``.pt2``
package compiled by AOTInductor, an ONNX Runtime session for ``.onnx``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from .model_inputs import ModelInputs, batch_inputs

Program = Callable[..., Tensor]
"""``program(*tensors)``: the model's inputs positionally, as ``ModelInputs.tensors``."""

# Run by ``python -I`` (no current folder, PYTHONPATH or user site on sys.path): argv = program, inputs, outputs,
# device, the top-level packages it must not import.
FRESH_RUN = """
import importlib.abc, sys
path, inputs_path, outputs_path, device, blocked = sys.argv[1:6]
blocked = set(blocked.split(","))

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"the program imports {name}, which is the project's", name=name)
        return None

sys.meta_path.insert(0, Blocked())
import torch, torch._inductor, zipfile
inputs = torch.load(inputs_path, weights_only=True)  # a list of tensors: forward's inputs, in order
if path.endswith(".pt2") and any("/data/aotinductor/" in name for name in zipfile.ZipFile(path).namelist()):
    with torch.no_grad():
        outputs = torch._inductor.aoti_load_package(path)(*[tensor.to(device) for tensor in inputs]).cpu()
elif path.endswith(".pt2"):
    with torch.no_grad():
        outputs = torch.export.load(path).module()(*[tensor.to(device) for tensor in inputs]).cpu()
else:
    import onnxruntime
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {port.name: tensor.numpy() for port, tensor in zip(session.get_inputs(), inputs)}
    outputs = torch.from_numpy(session.run(None, feed)[0])
torch.save(outputs, outputs_path)
"""


@dataclass(frozen=True)
class Score:
    """The float model and the quantized program on the validation set, by one metric."""

    metric: str
    """``accuracy`` (percent, for a classifier: logits ``(B, C)``, class indices ``(B,)``) or ``relative_rms_error``
    (of the program's outputs against the float model's, for any other output)."""
    float_value: float
    quantized_value: float
    samples: int


@dataclass(frozen=True)
class Latency:
    """Seconds per call over repeats, in milliseconds: median and interquartile range."""

    batch_size: int
    median_ms: float
    q1_ms: float
    q3_ms: float


def is_aoti_package(path: Path) -> bool:
    """Whether a ``.pt2`` file holds a program compiled by AOTInductor (else a ``torch.export`` program)."""
    with zipfile.ZipFile(path) as archive:
        return any("/data/aotinductor/" in name for name in archive.namelist())


def runtime(path: Path) -> str:
    """What runs the file: ``onnxruntime``, ``aoti`` (AOTInductor's compiled package) or ``torch.export``."""
    if path.suffix == ".onnx":
        return "onnxruntime"
    return "aoti" if is_aoti_package(path) else "torch.export"


def load_program(path: Path, device: str = "cpu", threads: int = 0) -> Program:
    """The exported file as a callable: a ``torch.export`` program or an AOTInductor package on ``device``, or ONNX
    Runtime on CPU with ``threads`` threads (0: its default; torch's are set by the caller)."""
    if path.suffix == ".pt2":
        if is_aoti_package(path):
            from torch._inductor import aoti_load_package  # AOTInductor's documented loader

            module = aoti_load_package(str(path))
        else:
            program = torch.export.load(path)
            if device != "cpu":  # exported on the CPU: its weights and the devices in its graph move together
                program = torch.export.passes.move_to_device_pass(program, device)
            module = program.module()

        def run(*inputs: Tensor) -> Tensor:
            with torch.no_grad():
                return module(*(tensor.to(device) for tensor in inputs))

        return run
    import onnxruntime  # optional: the `export` extra

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ports = [port.name for port in session.get_inputs()]

    def run_onnx(*inputs: Tensor) -> Tensor:
        feed = {name: tensor.cpu().numpy() for name, tensor in zip(ports, inputs, strict=True)}
        return torch.from_numpy(session.run(None, feed)[0])

    return run_onnx


def check_fresh_process(path: Path, inputs: ModelInputs, device: str, blocked: Collection[str], atol: float) -> float:
    """Runs the file on ``inputs`` in a new ``python -I`` that cannot import ``blocked`` packages; returns the largest
    difference from the same file's outputs in this process.

    Raises:
        RuntimeError: The program fails there (the line it ended with), or its outputs differ by more than ``atol``.
    """
    with tempfile.TemporaryDirectory() as folder:
        inputs_path, outputs_path = Path(folder, "inputs.pt"), Path(folder, "outputs.pt")
        torch.save([tensor.cpu() for tensor in inputs.tensors], inputs_path)
        command = [sys.executable, "-I", "-c", FRESH_RUN, str(path), str(inputs_path), str(outputs_path), device]
        done = subprocess.run(
            [*command, ",".join(sorted(blocked))], cwd=folder, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            raise RuntimeError(f"{path}: does not run in a fresh process without the project: {last}")
        outputs = torch.load(outputs_path, weights_only=True)
    error = (outputs - load_program(path, device)(*inputs.tensors).cpu()).abs().max().item()
    if not error <= atol:
        raise RuntimeError(f"{path}: a fresh process computes other outputs: they differ by {error:.3g} > {atol:g}")
    return error


def validation_batches(model: pl.LightningModule, datamodule: pl.LightningDataModule | None) -> Iterable[object]:
    """The first validation loader of the data (else of the model).

    Raises:
        ValueError: Neither has a ``val_dataloader``: nothing to check a quantized program on.
    """
    if datamodule is not None and is_overridden("val_dataloader", datamodule):
        datamodule.setup("validate")
        loaders = datamodule.val_dataloader()
    elif is_overridden("val_dataloader", model):
        loaders = model.val_dataloader()
    else:
        raise ValueError(
            "quantize: the data has no val_dataloader: a quantized program is checked against the float model on"
            " the validation set"
        )
    return loaders[0] if isinstance(loaders, (list, tuple)) else loaders


def score(model: torch.nn.Module, program: Program, batches: Iterable[object], like: ModelInputs) -> Score:
    """Accuracy of the float ``model`` and of ``program`` where batches hold class indices after the inputs and the
    outputs are logits; otherwise the program's relative RMS error against the float outputs. ``like``: the
    model's inputs, which batches hold (``model_inputs.batch_inputs``)."""
    correct_float = correct_quantized = samples = 0
    squared_error = squared_norm = 0.0
    classifier = True
    for batch in batches:
        inputs, targets = batch_inputs(batch, like)
        with torch.no_grad():
            expected = inputs.call(model)  # (B, C) logits, or any output
        outputs = program(*inputs.tensors).cpu().to(expected.dtype)
        squared_error += (outputs - expected).double().square().sum().item()
        squared_norm += expected.double().square().sum().item()
        samples += len(inputs)
        classifier = classifier and _classes(expected, targets)
        if classifier:
            correct_float += (expected.argmax(1) == targets).sum().item()
            correct_quantized += (outputs.argmax(1) == targets).sum().item()
    if samples == 0:
        raise ValueError("quantize: the validation loader gave no batch to check the quantized program on")
    if classifier:
        return Score("accuracy", 100 * correct_float / samples, 100 * correct_quantized / samples, samples)
    return Score("relative_rms_error", 0.0, (squared_error / max(squared_norm, 1e-30)) ** 0.5, samples)


def _classes(outputs: Tensor, targets: Tensor | None) -> bool:
    return (
        isinstance(targets, Tensor)
        and outputs.ndim == 2
        and outputs.shape[1] > 1
        and not targets.is_floating_point()
        and targets.shape == outputs.shape[:1]
    )


def latencies(
    programs: dict[str, Program], sample: ModelInputs, batch_size: int, repeats: int, device: str, threads: int
) -> dict[str, Latency]:
    """Times each program on a batch of ``batch_size`` copies of the samples, after 3 calls to warm it up, with
    ``threads`` torch threads (0: torch's default). The programs take turns, call by call, so that a machine shared
    with other work slows each of them alike."""
    inputs = sample.rows(torch.arange(batch_size) % len(sample)).to(device).tensors  # each (batch_size, ...)
    times: dict[str, list[float]] = {name: [] for name in programs}
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        for index in range(repeats + 3):
            for name, program in programs.items():
                start = time.perf_counter()
                program(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                if index >= 3:
                    times[name].append(1e3 * (time.perf_counter() - start))
    finally:
        torch.set_num_threads(before)
    return {name: _summary(batch_size, taken) for name, taken in times.items()}


def _summary(batch_size: int, times: list[float]) -> Latency:
    q1, median, q3 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else (times[0],) * 3
    return Latency(batch_size, median, q1, q3)
