"""runkit's release: the version it reports is its CHANGELOG's newest release, projects that install it from an index
name that release's range, and runs made by the release before (0.1.0) keep working under this one.

The runs are made by runkit 0.1.0 as it was released (its source and its fixture task, from git at ``RELEASED``) and
then validated, listed and resumed by this working tree's runkit: the resume ends bit-identical to 0.1.0's own
uninterrupted run (a run started by 0.1 keeps per-batch augmentation seeding: CHANGELOG 0.2.0).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT, git
from runkit.testing.faults import fault

RELEASED = "c3a8b57"  # the last commit of runkit 0.1.0 (2026-12-02)
FLAGS = ("--trainer.max_epochs=2", "--data.init_args.num_workers=2", "--trainer.default_root_dir=runs")


def newest_release(changelog: str) -> str:
    """The version of the first ``## X.Y.Z (date)`` heading."""
    found = re.search(r"^## (\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}\)$", changelog, re.MULTILINE)
    assert found is not None, "no released version in runkit/CHANGELOG.md"
    return found.group(1)


def test_runkit_reports_its_newest_release_and_index_projects_name_its_range() -> None:
    changelog = (ROOT / "runkit" / "CHANGELOG.md").read_text()
    version = importlib.metadata.version("runkit")
    assert version == newest_release(changelog)
    assert tuple(int(part) for part in version.split(".")) >= (0, 2, 0)
    spec = importlib.util.spec_from_file_location("local_extensions_of_this_release", ROOT / "local_extensions.py")
    assert spec is not None
    assert spec.loader is not None
    extensions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extensions)
    major, minor, _ = version.split(".")
    assert f"runkit>={major}.{minor},<{major}.{int(minor) + 1}" == extensions.INDEX_RANGE
    assert f"runkit-v{version}" in (ROOT / "runkit" / "README.md").read_text()  # the tag it tells people to install


def released_source(destination: Path) -> Path:
    """runkit's source and tests as released at ``RELEASED``, unpacked under ``destination``."""
    archive = destination / "runkit-0.1.0.tar"
    git(ROOT, "archive", "--output", str(archive), RELEASED, "runkit/src", "runkit/tests")
    with tarfile.open(archive) as tar:
        tar.extractall(destination, filter="data")
    return destination / "runkit"


def fixture_cli(kit: Path, tests: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m fixture_cli`` of runkit 0.1.0's tests, with the runkit of ``kit`` (a ``src`` folder)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(kit), str(tests)]),
        "KIT_DEFAULT_CONFIG": str(tests / "fixture.yaml"),
        "PYTHONWARNINGS": "ignore",
    }
    command = [sys.executable, "-m", "fixture_cli", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_runs_made_by_runkit_0_1_are_validated_listed_and_resumed_exactly(tmp_path: Path) -> None:
    old = released_source(tmp_path)
    new = ROOT / "runkit" / "src"
    tests = old / "tests"
    made = fixture_cli(old / "src", tests, tmp_path, "fit", *FLAGS, "--run.name=straight")
    assert made.returncode == 0, made.stderr[-3000:]
    stop = fault("SignalAtStep", step=20, signum=int(signal.SIGTERM), hook="start")
    stopped = fixture_cli(old / "src", tests, tmp_path, "fit", *FLAGS, "--run.name=stopped", stop)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]

    listed = fixture_cli(new, tests, tmp_path, "runs")
    assert listed.returncode == 0, listed.stderr[-3000:]
    rows = {line.split()[1]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert sorted(rows) == ["stopped", "straight"]
    assert "finished" in rows["straight"]
    assert "preempted" in rows["stopped"]
    checked = fixture_cli(
        new, tests, tmp_path, "validate", "-c", "runs/fixture/straight/config.yaml", "--ckpt_path=best"
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "val/loss" in checked.stdout
    resumed = fixture_cli(new, tests, tmp_path, "fit", "-c", "runs/fixture/stopped/config.yaml", "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    straight, continued = (
        torch.load(tmp_path / f"runs/fixture/{name}/checkpoints/last.ckpt", weights_only=True)
        for name in ("straight", "stopped")
    )
    assert continued["global_step"] == straight["global_step"]
    for key, tensor in straight["state_dict"].items():
        assert torch.equal(continued["state_dict"][key], tensor), key
    record = yaml.safe_load((tmp_path / "runs/fixture/stopped/provenance.yaml").read_text())
    assert [session["status"] for session in record["sessions"]] == ["preempted", "finished"]
