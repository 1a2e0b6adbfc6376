"""Precision: ``bf16-mixed`` against ``32-true`` step time, on the CPU, with the project's ``fit``.

On CPUs without native bf16 arithmetic (AVX512-BF16/AMX), autocast's casts usually cost more than they
save; on GPUs the same switch is typically a large speed-up. Reported as measured.
"""

from __future__ import annotations

from pathlib import Path

from common import TINY_PRESETS, Row, best_median_ms, median_ratios, steady, timed_fit


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps = 6 if tiny else 40
    presets = TINY_PRESETS if tiny else ()
    durations: dict[str, list[list[float]]] = {"32-true": [], "bf16-mixed": []}
    for repeat in range(repeats):
        for precision in list(durations) if repeat % 2 == 0 else list(durations)[::-1]:
            _, timer = timed_fit(workdir, steps, f"--trainer.precision={precision}", presets=presets)
            durations[precision].append(steady(timer.ends, timer.start, warmup=steps // 5))
    return [
        Row(
            "Precision, steady-state step (ConvNet, CPU)",
            "32-true",
            best_median_ms(durations["32-true"]),
            "bf16-mixed",
            best_median_ms(durations["bf16-mixed"]),
            "ms",
            note=f"ratio per pair of alternated runs; values: the best of {repeats} runs' median step; no goal",
            repeats=median_ratios(durations["bf16-mixed"], durations["32-true"]),
        )
    ]
