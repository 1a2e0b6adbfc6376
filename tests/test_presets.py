"""Every generation preset under configs/ bakes, and its answers reach the project."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

PRESETS = sorted((ROOT / "configs").glob("*.yaml"))
PROMPTS = {key: value for key, value in json.loads((ROOT / "cookiecutter.json").read_text()).items() if key[0] != "_"}


def test_presets_exist() -> None:
    assert {"default", "minimal", "full", "team-example"} <= {preset.stem for preset in PRESETS}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda path: path.stem)
def test_preset_answers_known_prompts(preset: Path) -> None:
    # cookiecutter ignores unknown keys: a misspelled one would silently keep the default.
    answers = yaml.safe_load(preset.read_text())["default_context"]
    assert set(answers) <= set(PROMPTS)
    for key, value in answers.items():
        assert isinstance(value, str), f"{key}: quote it, YAML would read {value!r} as a {type(value).__name__}"
        if isinstance(PROMPTS[key], list):
            assert value in PROMPTS[key], f"{key}: {value!r} is not one of {PROMPTS[key]}"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda path: path.stem)
def test_preset_bakes(tmp_path: Path, preset: Path) -> None:
    defaults = {key: value[0] if isinstance(value, list) else value for key, value in PROMPTS.items()}
    answers = {**defaults, **yaml.safe_load(preset.read_text())["default_context"]}
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--config-file", str(preset)]
    result = subprocess.run([*command, "--output-dir", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (project,) = tmp_path.iterdir()
    readme = (project / "README.md").read_text(encoding="utf-8")
    assert readme.startswith(f"# {answers['project_name']}\n")
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["requires-python"] == f">={answers['python_version']}"
    assert meta["authors"] == [{"name": answers["author_name"], "email": answers["email"]}]
    assert answers["license"].replace("Proprietary", "LicenseRef-Proprietary") == meta["license"]
    if "{{" not in answers["project_slug"]:  # set explicitly, not derived from the name
        assert project.name == answers["project_slug"]
    if "{{" not in answers["package_name"]:
        assert (project / "src" / answers["package_name"] / "cli.py").is_file()
    (runkit,) = [line for line in meta["dependencies"] if line.startswith("runkit")]
    wanted = {"index": "runkit>=0.2,<0.3", "auto": auto_requirement()}
    assert runkit == wanted.get(answers["runkit_requirement"], answers["runkit_requirement"])


def auto_requirement() -> str:
    """What ``auto`` names, baked from this checkout: its folder, or, in a clone whose remote has its commit (a CI
    checkout), that remote's git URL at the commit (tests/test_runkit_requirement.py tests both ways)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "HEAD")
    refs = git("for-each-ref", "--contains", head, "--format=%(refname)", "refs/remotes") if head else ""
    if not refs:
        return f"runkit @ {ROOT.as_uri()}/runkit"
    url = git("remote", "get-url", refs.splitlines()[0].removeprefix("refs/remotes/").split("/")[0])
    url = Path(url).resolve().as_uri().replace("file:///", "file://localhost/") if "://" not in url else url
    return f"runkit @ git+{url}@{head}#subdirectory=runkit"
