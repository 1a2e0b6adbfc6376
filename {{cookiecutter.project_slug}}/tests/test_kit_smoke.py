"""The installed runkit on this project's own task, run as a user runs it: the console script trains a small run in
a session of its own, a SIGTERM to its whole process group (as ``scancel`` sends it) stops it with ``last.ckpt``
saved, ``--ckpt_path last`` finishes it, and ``validate`` scores its best checkpoint. runkit's own suite covers the
rest of what it promises, on its fixture task; this checks that it holds on this one, with the version installed.

It names no class, preset or metric of the task (the run's configs say them), so it holds when the example is replaced.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from runkit.testing.faults import fault
from runkit.testing.support import child_path, last_checkpoint, run_dir_flags
from support import PACKAGE, ROOT, SMALL_RUN, config_flags

pytestmark = pytest.mark.slow


def console_script() -> str:
    """This project's command, installed next to this interpreter (also when its environment is not activated)."""
    script = shutil.which(PACKAGE, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert script, f"console script {PACKAGE} is not installed: pip install -e ."
    return script


def command(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Runs the console script in a session of its own (its own process group), as a shell's job; output as text."""
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [console_script(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )


def test_fit_a_group_sigterm_the_resume_and_validate_with_the_installed_kit(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "smoke" / "run"
    flags = [*config_flags(*SMALL_RUN), *run_dir_flags(run)]  # 2 epochs of at most 4 batches
    scancel = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=2)
    stopped = command(tmp_path, "fit", *flags, scancel)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    preempted = last_checkpoint(run)["global_step"]
    assert preempted >= 2, stopped.stderr[-3000:]
    resumed = command(tmp_path, "fit", f"--config={run / 'config.yaml'}", "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    finished = last_checkpoint(run)
    assert finished["global_step"] > preempted
    sessions = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
    assert [session["status"] for session in sessions] == ["preempted", "finished"]
    best = finished["callbacks"]["BestCheckpoint"]  # the metric the run's config ranks by, and its best value
    validated = command(tmp_path, "validate", f"--config={run / 'config.yaml'}", "--ckpt_path=best")
    assert validated.returncode == 0, validated.stderr[-3000:]
    # Lightning's table has rich's borders where rich is installed (no extra of this project brings it), none without.
    row = re.search(rf"{re.escape(best['monitor'])}\s+(?:│\s+)?(\S+)", validated.stdout)
    assert row, validated.stdout[-2000:]
    assert float(row.group(1)) == pytest.approx(float(best["best_model_score"]), rel=1e-4, abs=1e-6)


def test_the_installed_runkit_is_one_this_project_admits() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (wanted,) = [Requirement(line) for line in dependencies if Requirement(line).name == "runkit"]
    installed = importlib.metadata.version("runkit")
    assert wanted.specifier.contains(installed, prereleases=True), f"runkit {installed} installed, {wanted} wanted"
