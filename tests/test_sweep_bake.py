"""``sweep`` on the default bake, as the issue's "done when" says: 4 cells on 2 workers, a group SIGTERM after the
first cell, the same command again: 4 finished runs, none trained twice, a results.csv of 2 rows over 2 seeds."""

from __future__ import annotations

import csv
import hashlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

pytest.importorskip("optuna", reason="sweep needs the project's `search` extra (Optuna)")

COMMAND = [
    "sweep", "-c", "configs/debug/tiny.yaml", "-c", "configs/example/small_data.yaml", "--trainer.max_epochs", "3",
    "--grid", "configs/example/model.yaml,configs/example/transformer.yaml", "--grid", "seed_everything=1,2",
    "--workers", "2",
]  # fmt: skip
SWEEP = Path("runs/debug/sweep")
CELLS = sorted(f"{net},seed_everything={seed}" for net in ("model", "transformer") for seed in (1, 2))
PATIENCE = 1800
"""Seconds to wait for an event (a line, an exit): minutes on a quiet machine, far more than a slow one needs."""


def start(project: Path, log: Path) -> subprocess.Popen[bytes]:
    """``python -m <package> sweep ...`` in the project, from its source tree (no install), in a group of its own."""
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "PYTHONWARNINGS": "ignore"}
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", project.name.replace("-", "_"), *COMMAND],
            cwd=project,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def finish(process: subprocess.Popen[bytes], log: Path, what: str) -> int:
    try:
        return process.wait(PATIENCE)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"waited {PATIENCE} s for {what}; {log} ends:\n{log.read_text()[-3000:]}") from None


def files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.slow
def test_a_sweep_stopped_by_a_group_sigterm_finishes_with_the_same_command(baked: Callable[..., Path]) -> None:
    project = baked()
    # The example sweep YAML the template ships: its 6 cells' fit commands, nothing written.
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "PYTHONWARNINGS": "ignore"}
    package = project.name.replace("-", "_")
    dry = [sys.executable, "-m", package, "sweep", "-c", "configs/example/sweep.yaml", "--dry_run", "true"]
    shown = subprocess.run(dry, cwd=project, env=env, capture_output=True, text=True, timeout=PATIENCE)
    assert shown.returncode == 0, shown.stderr[-3000:]
    commands = [line for line in shown.stdout.splitlines() if f": {package} fit " in line]
    assert len(commands) == 6
    assert commands[-1].startswith(
        f"transformer,seed_everything=3: {package} fit --config=configs/example/transformer.yaml"
    )
    assert not (project / "runs").exists()
    sweep_dir, log = project / SWEEP, project / "first.log"
    first = start(project, log)
    deadline = time.monotonic() + PATIENCE
    while not any(" complete: " in line for line in log.read_text().splitlines()):
        assert first.poll() is None, (
            f"the sweep ended ({first.returncode}) before a cell completed:\n{log.read_text()[-3000:]}"
        )
        assert time.monotonic() < deadline, (
            f"waited {PATIENCE} s for a first cell to complete:\n{log.read_text()[-3000:]}"
        )
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGTERM)  # the command and its 2 workers
    assert finish(first, log, "the sweep to stop on SIGTERM") == 143, log.read_text()[-3000:]
    finished = [
        cell for cell in CELLS
        if (sweep_dir / cell / "provenance.yaml").is_file()
        and yaml.safe_load((sweep_dir / cell / "provenance.yaml").read_text())["sessions"][-1]["status"] == "finished"
    ]  # fmt: skip
    assert finished, log.read_text()[-3000:]
    before = {cell: files(sweep_dir / cell) for cell in finished}

    again = project / "again.log"
    assert finish(start(project, again), again, "the same command to finish") == 0, again.read_text()[-3000:]
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()) == CELLS  # 4 runs, none duplicated
    best = {}
    for cell in CELLS:
        record = yaml.safe_load((sweep_dir / cell / "provenance.yaml").read_text())
        assert record["sessions"][-1]["status"] == "finished"
        best[cell] = record["progress"]["best"]["value"]
    assert {cell: files(sweep_dir / cell) for cell in finished} == before  # none trained again
    with open(sweep_dir / "results.csv") as file:
        rows = list(csv.DictReader(file))
    assert [(row["example"], row["n"]) for row in rows] == [("model", "2"), ("transformer", "2")]
    for row in rows:
        seeds = [best[f"{row['example']},seed_everything={seed}"] for seed in (1, 2)]
        assert float(row["val/acc mean"]) == pytest.approx(statistics.fmean(seeds))
        assert float(row["val/acc std"]) == pytest.approx(statistics.stdev(seeds))
