"""Every generation preset under configs/ bakes, and its answers reach the project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

PRESETS = sorted((ROOT / "configs").glob("*.yaml"))


def test_presets_exist() -> None:
    assert ROOT / "configs" / "default.yaml" in PRESETS


@pytest.mark.parametrize("preset", PRESETS, ids=lambda path: path.stem)
def test_preset_bakes(tmp_path: Path, preset: Path) -> None:
    answers = yaml.safe_load(preset.read_text())["default_context"]
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--config-file", str(preset)]
    result = subprocess.run([*command, "--output-dir", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (project,) = tmp_path.iterdir()
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert readme.startswith(f"# {answers['project_name']}\n")
    assert f'requires-python = ">={answers["python_version"]}"' in (project / "pyproject.toml").read_text()
