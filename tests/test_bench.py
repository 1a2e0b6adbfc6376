"""The benchmark scripts run end to end on a baked project, in tiny mode (seconds; its numbers measure nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT

BENCH_ANSWERS = {"project_name": "Bench Rig"}
"""A package of its own: the default bake's (image_classifier) is installed and removed by other tests meanwhile."""

PATIENCE = 3600
"""Seconds to wait for a benchmark script to end (the tiny run of them all: about 3 min on 2 idle cores): far more than
a machine 10x slower needs, within CI's 90 min. Giving up names what was running and prints its threads' stacks."""


def run_to_the_end(args: list[str], env: dict[str, str], cwd: Path) -> str:
    """Runs ``args`` (a bench script) until it exits 0; its stdout. Fails when it fails or still runs after
    ``PATIENCE``, naming the comparison it was in (runkit/bench/run.py says on stderr when each starts)."""
    out, err = cwd / "stdout.txt", cwd / "stderr.txt"
    env = {**env, "PYTHONFAULTHANDLER": "1"}  # SIGABRT prints every thread's stack before it ends the process
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(args, stdout=stdout, stderr=stderr, env=env, cwd=cwd)
        try:
            code = process.wait(PATIENCE)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            code = None
    lines = err.read_text().splitlines()
    started = [line.split()[1] for line in lines if line.startswith("bench: ") and line.endswith(" started")]
    where = f", in comparison {started[-1]} (finished: {', '.join(started[:-1]) or 'none'})" if started else ""
    ended = f"still running after {PATIENCE} s" if code is None else f"exited {code}"
    assert code == 0, f"{Path(args[1]).name}: {ended}{where}; its stderr ends:\n" + "\n".join(lines[-200:])
    return out.read_text()


@pytest.mark.bench  # `make test-bench`: minutes, and only about runkit/bench/
def test_bench_runner_tiny(installed: Callable[..., Path], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BENCH_PROJECT": str(installed(**BENCH_ANSWERS))}
    args = [sys.executable, str(ROOT / "runkit" / "bench" / "run.py"), "--tiny=true"]
    table = run_to_the_end(args, env, tmp_path)
    for comparison in (
        "Trainer overhead",
        "Kit's cost per step over bare Lightning",
        "Lightning's cost per step over the hand loop",
        "Kit part per step",
        "Compiled Transformer",
        "Startup",
        "Data pipeline",
        "Data seam",
        "Precision",
        "DDP",
        "Non-finite weights check, cost per step",
        "Checkpoint digest: write of a",
        "Checkpoint digest: check on load, pages dropped first",
        "Tracker cost per step: csv",
        "Tracker cost per step: mlflow (local file store)",
        "Start-up, bench_rig fit --help",
        "Growth: default run's step, batch 32",
        "Growth: default run's step, width [64, 128]",
        "Growth: `bench_rig runs` over 10 runs",
    ):
        assert f"| {comparison}" in table
    assert "CUDA Transformer" in table  # measured on a GPU, else listed as skipped
    assert "losses over 6 steps: identical" in table  # fit and the hand-written loop compute the same thing
    assert "same weights | yes" in table  # two DDP processes end where one process does
    assert "Machine: " in table


@pytest.mark.bench  # `make test-bench`, with the other benchmark scripts
def test_overhead_profile_lists_where_fit_spends_more_than_the_loop(
    installed: Callable[..., Path], tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BENCH_PROJECT": str(installed(**BENCH_ANSWERS))}
    args = [
        sys.executable,
        str(ROOT / "runkit" / "bench" / "overhead_profile.py"),
        "--short=2",
        "--long=4",
        "--rows=100000",  # every function: which ones rank first is timing, and timing is the machine's load
    ]
    rows = [line for line in run_to_the_end(args, env, tmp_path).splitlines() if line.startswith(("| +", "| -"))]
    assert len(rows) > 100
    calls = {row.split("`")[1]: tuple(float(cell) for cell in row.split("|")[2:4]) for row in rows}
    # Calls per step are counts, not timings: Lightning's training loop runs once per step under fit, never in the loop.
    loop_steps = {
        key: count for key, count in calls.items() if "loops/training_epoch_loop.py" in key and key.endswith(" advance")
    }
    assert loop_steps
    assert all(fit >= 1.0 and loop == 0.0 for fit, loop in loop_steps.values()), loop_steps
