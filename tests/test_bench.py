"""The benchmark scripts run end to end on a baked project, in tiny mode (seconds; its numbers measure nothing)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_bench_runner_tiny(installed: Callable[..., Path], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BENCH_PROJECT": str(installed())}
    args = [sys.executable, str(ROOT / "bench" / "run.py"), "--tiny=true"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout
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
        "Start-up, image_classifier fit --help",
        "Growth: default run's step, batch 32",
        "Growth: default run's step, width [64, 128]",
        "Growth: `image_classifier runs` over 10 runs",
    ):
        assert f"| {comparison}" in table
    assert "CUDA Transformer" in table  # measured on a GPU, else listed as skipped
    assert "losses over 6 steps: identical" in table  # fit and the hand-written loop compute the same thing
    assert "same weights | yes" in table  # two DDP processes end where one process does
    assert "Machine: " in table


@pytest.mark.slow
def test_overhead_profile_lists_where_fit_spends_more_than_the_loop(
    installed: Callable[..., Path], tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "BENCH_PROJECT": str(installed())}
    args = [sys.executable, str(ROOT / "bench" / "overhead_profile.py"), "--short=2", "--long=4", "--rows=40"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| +") or line.startswith("| -")]
    assert len(rows) == 40
    assert any("lightning/pytorch/" in row for row in rows)  # Lightning's per-step calls are where fit spends more
