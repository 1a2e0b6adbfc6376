"""Where the kit's cost per step goes: each part of it against the same ``fit`` without that part.

The near-empty step of ``overhead.py`` (2-channel ConvNet, batch 8, no loader worker, one torch thread), timed in
CPU time of the stepping thread, the two sides alternated step by step (``alternate.py``). The second side runs in
a thread, where the preemption handler cannot install its signal handlers: both sides go without it, except in
its own row, where the side with it runs in the main thread.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from alternate import Paced, Side, alternate, paired
from common import TINY_PRESETS, Row, build
from overhead import NEAR_EMPTY

IDLE = [
    "SetupPhase",
    "StartCheck",
    "EpochMonitor",
    "EpochLine",
    "MemoryBudget",
    "ModelSummary",
    "Provenance",
    "MatmulPrecision",
]
PARTS = {  # row label: the always-on callbacks it takes out
    "exact resume (the resumable loader)": ("ExactResume",),
    "non-finite loss check": ("StopOnNonFiniteLoss",),
    "best and last checkpoints (ModelCheckpoint)": ("BestCheckpoint", "LastCheckpoint"),
    "gradient norm": ("GradNormMonitor",),
    "throughput": ("ThroughputMonitor",),
    "learning-rate monitor (Lightning's)": ("LearningRateMonitor",),
    "8 callbacks with no per-step work (Lightning calls each hook anyway)": tuple(IDLE),
}
PREEMPTION = ("Preemption",)


def kit_fit(workdir: Path, steps: int, without: tuple[str, ...], presets: tuple[str, ...]) -> Callable[[Side], None]:
    """A ``fit`` of the near-empty step without the callbacks named in ``without``, as one side."""
    run_dir = Path(tempfile.mkdtemp(prefix="part-", dir=workdir)) / "bench" / "run"
    tiny = ("--trainer.limit_train_batches=1.0",) if presets else ()  # debug/tiny's 4 batches are too few
    flags = (f"--trainer.max_steps={steps}", "--trainer.accelerator=cpu", *NEAR_EMPTY, *tiny)
    built = build(run_dir, *flags, presets=presets)
    built.trainer.callbacks[:] = [c for c in built.trainer.callbacks if type(c).__name__ not in without]

    def fit(side: Side) -> None:
        built.trainer.callbacks.append(Paced(side))
        built.trainer.fit(built.model, built.datamodule)

    return fit


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    presets = TINY_PRESETS if tiny else ()
    flags_period, repeat_periods, warmup = (1, 2, 2) if tiny else (10, 3, 10)
    n = 2 if tiny else 2 * repeats
    steps = warmup + n * repeat_periods * flags_period
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    for label, part in {"preemption (deferred signals)": PREEMPTION, **PARTS}.items():
        base = () if part == PREEMPTION else PREEMPTION
        with_part = kit_fit(workdir, steps, base, presets)
        without_part = kit_fit(workdir, steps, (*base, *part), presets)
        first, second = alternate(with_part, without_part, names=("with", "without"), clock=time.thread_time)
        result = paired(first, second, warmup, flags_period, repeat_periods)
        rows.append(
            Row(
                f"Kit part per step, near-empty step: {label}",
                "without it",
                result.median_ms("baseline"),
                "with it",
                result.median_ms("candidate"),
                "ms",
                note=f"CPU time of the stepping thread; {len(result.ratios)} repeats of {repeat_periods * flags_period}"
                f" steps; ratio {statistics.median(result.ratios):.3f}x",
                repeats=result.differences_ms,
                difference="ms",
            )
        )
    torch.set_num_threads(threads)
    return rows
