"""Runs the benchmarks and prints one markdown table with the machine it ran on.

    python bench/run.py                      # everything, full length (minutes)
    python bench/run.py --only overhead      # one comparison (see COMPARISONS)
    python bench/run.py --tiny true          # seconds: every script end to end, numbers meaningless

Each comparison alternates its two sides within one run, takes the median step of every run and reports
the best (least disturbed) of them per side, so numbers taken on a busy machine still compare; the README
keeps the latest table, the command and the machine.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
import time
from pathlib import Path

from jsonargparse import CLI

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling scripts, also when imported by tests

from common import report as bench_report

COMPARISONS = (
    *("overhead", "kit_parts", "compiled", "startup", "data_pipeline", "data_seam", "precision", "ddp", "gpu"),
    *("safeguards", "checkpoint_digests", "trackers", "growth"),
)


def main(tiny: bool = False, repeats: int = 5, only: list[str] | None = None) -> str:
    """Runs the comparisons and prints the table.

    Args:
        tiny: A few steps per side and one repeat: checks that every script runs, measures nothing.
        repeats: Alternations of the two sides per comparison (``tiny`` uses 1).
        only: Run just these comparisons (names as in ``COMPARISONS``).
    """
    names = only or list(COMPARISONS)
    if unknown := set(names) - set(COMPARISONS):
        raise ValueError(f"only: unknown comparisons {sorted(unknown)}; choose from {list(COMPARISONS)}")
    repeats = 1 if tiny else repeats
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as workdir:
        for name in names:
            print(f"bench: {name} started", file=sys.stderr, flush=True)  # what a test waiting on this names
            began = time.perf_counter()
            rows += importlib.import_module(name).run(tiny=tiny, repeats=repeats, workdir=Path(workdir))
            print(f"bench: {name} took {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    report = bench_report(rows, start, tiny)
    print(report)
    return report


if __name__ == "__main__":
    CLI(main)
