"""What the safeguards cost: the non-finite loss and weights checks, input validation, and atomic checkpoint writes.

The loss check is measured as whole training steps of the default run with and without it, and alone; the weights
check (one fused norm of the parameters after each optimizer step) alone, on the default run's model.
On a GPU its one host read per step comes right after torchmetrics' own host read of the same loss (the
NaN check in ``MeanMetric.update``), so it waits for no further device work; on the CPU there is no wait.
"""

from __future__ import annotations

import importlib
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from common import TINY_PRESETS, Row, StepTimer, build, fit_once, judge, median_ms, median_ratios, project, steady
from lightning.pytorch.plugins.io import TorchCheckpointIO


def guarded_fit(workdir: Path, steps: int, guard: bool, presets: tuple[str, ...]) -> tuple[StepTimer, Path]:
    """A CPU ``fit`` of ``steps`` optimizer steps, with or without ``StopOnNonFinite``."""
    without = None if guard else importlib.import_module("runkit.safety.nonfinite").StopOnNonFinite
    _, timer, run_dir = fit_once(workdir, steps, presets=presets, without=without)
    return timer, run_dir / "checkpoints" / "last.ckpt"


def check_alone_us(calls: int) -> float:
    """Microseconds per call of the check on a finite scalar loss."""
    guard, loss = importlib.import_module("runkit.safety.nonfinite").StopOnNonFinite(), torch.tensor(2.3)
    start = time.perf_counter()
    for _ in range(calls):
        guard.on_before_backward(None, None, loss)  # type: ignore[arg-type]
    return 1e6 * (time.perf_counter() - start) / calls


def validation_rows(tiny: bool, repeats: int) -> list[Row]:
    synthetic, data_checks = project("task.gratings"), importlib.import_module("runkit.safety.data_checks")
    rows = []
    for label, size in (("the default data (train + val + test)", 14_000), ("a large set", 200_000)):
        size = min(size, 2_000) if tiny else size
        start = time.perf_counter()
        images, labels = synthetic.render_gratings(size, 10, 28, 1, seed=0)
        render_s = time.perf_counter() - start
        checks = []
        for _ in range(repeats):
            start = time.perf_counter()
            data_checks.check_samples("train", images, labels, 10, (1, 28, 28))
            checks.append(time.perf_counter() - start)
        check_s = statistics.median(checks)
        shares = [check / render_s for check in checks]  # one rendering: the spread is the validation's
        rows.append(
            Row(
                f"Input validation, {label}",
                "rendering the set",
                render_s,
                "validating it",
                check_s,
                "s",
                goal="<= 0.25x",
                met=judge(shares, 0.25),
                repeats=shares,
                note=f"{size} samples (1, 28, 28) float16; median of {repeats}",
            )
        )
    return rows


def write_rows(checkpoint: dict[str, Any], workdir: Path, repeats: int, tiny: bool) -> list[Row]:
    big = {"state_dict": {"weight": torch.randn(2_500_000 if tiny else 25_000_000)}}  # 10 or 100 MB
    rows = []
    for label, payload in (("the default ConvNet", checkpoint), ("a large state", big)):
        times: dict[str, list[float]] = {"lightning": [], "atomic": []}
        writers = {
            "lightning": TorchCheckpointIO(),
            "atomic": importlib.import_module("runkit.safety.checkpoint_io").AtomicCheckpointIO(),
        }
        for repeat in range(max(3, repeats)):
            order = ("lightning", "atomic") if repeat % 2 == 0 else ("atomic", "lightning")
            for side in order:
                start = time.perf_counter()
                writers[side].save_checkpoint(payload, workdir / "writes" / f"{side}.ckpt")
                times[side].append(time.perf_counter() - start)
        size_mb = (workdir / "writes" / "atomic.ckpt").stat().st_size / 2**20
        lightning_ms, atomic_ms = median_ms(times["lightning"]), median_ms(times["atomic"])
        rows.append(
            Row(
                f"Checkpoint write, {label} ({size_mb:.2f} MB)",
                "Lightning (BytesIO, fsspec)",
                lightning_ms,
                "atomic (fsync, rename)",
                atomic_ms,
                "ms",
                note="the atomic write waits until the bytes are on disk; Lightning's does not",
                repeats=[a / b for a, b in zip(times["atomic"], times["lightning"], strict=True)],
            )
        )
    return rows


def weights_check_us(workdir: Path, presets: tuple[str, ...], calls: int) -> float:
    """Microseconds per call of the weights check after an optimizer step, on the default run's model."""
    built = build(workdir / "weights-check", presets=presets)
    guard = importlib.import_module("runkit.safety.nonfinite").StopOnNonFinite()
    start = time.perf_counter()
    for _ in range(calls):
        guard.on_optimizer_step_end(built.trainer, built.model)
    return 1e6 * (time.perf_counter() - start) / calls


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps, warmup = (6, 2) if tiny else (60, 10)
    presets = TINY_PRESETS if tiny else ()
    durations: dict[bool, list[list[float]]] = {True: [], False: []}
    last = Path()
    for repeat in range(repeats):
        for guard in (True, False) if repeat % 2 == 0 else (False, True):  # alternate, so drift hits both sides
            timer, last = guarded_fit(workdir, steps, guard, presets)
            durations[guard].append(steady(timer.ends, timer.start, warmup))
    with_ms, without_ms = (median_ms([d for run in durations[guard] for d in run]) for guard in (True, False))
    alone = [check_alone_us(1_000 if tiny else 20_000) / 1e3 for _ in range(repeats)]
    alone_ms = statistics.median(alone)
    shares = [a / (1e3 * statistics.median(run)) for a, run in zip(alone, durations[True], strict=True)]
    weights = [weights_check_us(workdir, presets, 100 if tiny else 2_000) / 1e3 for _ in range(repeats)]
    weight_shares = [w / (1e3 * statistics.median(run)) for w, run in zip(weights, durations[True], strict=True)]
    rows = [
        Row(
            "Non-finite weights check, cost per step",
            "a training step",
            with_ms,
            "the check alone",
            statistics.median(weights),
            "ms",
            goal="<= 0.005x",
            met=judge(weight_shares, 0.005),
            note="one fused norm of every parameter after each optimizer step (torch.nn.utils.get_total_norm), one"
            " host read; per repeat, the check alone over that repeat's fit's median step",
            repeats=weight_shares,
        ),
        Row(
            "Non-finite loss check, cost per step",
            "a training step",
            with_ms,
            "the check alone",
            alone_ms,
            "ms",
            goal="<= 0.01x",
            met=judge(shares, 0.01),
            note="one host read of the loss, right after torchmetrics' own (MeanMetric's NaN check); per repeat, "
            "the check alone over that repeat's fit's median step",
            repeats=shares,
        ),
        Row(
            "Non-finite loss check, whole steps",
            "without the check",
            without_ms,
            "with it",
            with_ms,
            "ms",
            note=f"{steps} steps x {repeats}, alternated, first {warmup} dropped; compare the check alone, above",
            repeats=median_ratios(durations[True], durations[False]),
        ),
        *validation_rows(tiny, repeats),
        *write_rows(torch.load(last, weights_only=True), workdir, repeats, tiny),
    ]
    return rows
