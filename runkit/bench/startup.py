"""Startup: ``<package> fit --help`` against ``python -c "import lightning.pytorch"``, in fresh processes.

The difference is what the project adds to every command before any work starts; heavy imports that
only some commands need belong inside those commands. A bare ``LightningCLI``'s ``fit --help`` is timed
too: LightningCLI builds the parser of every subcommand on every call, whatever the project.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import PACKAGE, Row, judge


def command() -> list[str]:
    """The console script next to this interpreter, or ``python -m <package>`` without one."""
    script = shutil.which(PACKAGE, path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", PACKAGE]


def wall_time(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return time.perf_counter() - start


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    bare_cli = "from lightning.pytorch.cli import LightningCLI; LightningCLI(args=['fit', '--help'])"
    sides = {
        "import": [sys.executable, "-c", "import lightning.pytorch"],
        "bare": [sys.executable, "-c", bare_cli],  # what LightningCLI itself costs, for reference
        "help": [*command(), "fit", "--help"],
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(1 if tiny else 2 * repeats):  # short runs: more samples are cheap
        for side, args in sides.items():
            times[side].append(wall_time(args))
    baseline, bare, candidate = (statistics.median(times[side]) for side in ("import", "bare", "help"))
    added = [h - i for h, i in zip(times["help"], times["import"], strict=True)]
    return [
        Row(
            "Startup",
            "import lightning.pytorch",
            baseline,
            f"{PACKAGE} fit --help",
            candidate,
            "s",
            goal="adds <= 0.3 s",
            met=judge(added, 0.3),
            note=f"what it adds per round of fresh processes; a bare LightningCLI's `fit --help` adds "
            f"{bare - baseline:+.2f} s; {len(times['help'])} rounds",
            repeats=added,
            difference="s",
        )
    ]
