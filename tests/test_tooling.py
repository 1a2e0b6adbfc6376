"""A generated project's tooling: CI workflow, Makefile, pre-commit and launch scripts, checked against the project."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_bake import files_of

Baked = Callable[..., Path]


def make(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", f"PYTHON={sys.executable}", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def makefile_targets(project: Path) -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", (project / "Makefile").read_text(), re.MULTILINE))


def workflow(project: Path) -> dict:
    return yaml.safe_load((project / ".github/workflows/ci.yml").read_text())


def run_commands(project: Path) -> list[str]:
    return [step["run"] for job in workflow(project)["jobs"].values() for step in job["steps"] if "run" in step]


def test_workflow_parses_and_has_its_jobs(default_bake: Path) -> None:
    ci = workflow(default_bake)
    triggers = ci[True]  # YAML 1.1 reads the key `on` as true
    assert {"push", "pull_request", "schedule"} <= set(triggers)
    assert "labeled" in triggers["pull_request"]["types"]  # labelling a pull request `gpu` starts the GPU job
    jobs = ci["jobs"]
    assert set(jobs) == {"lint", "test", "gpu"}
    assert jobs["gpu"]["if"] == "contains(github.event.pull_request.labels.*.name, 'gpu')"
    assert "self-hosted" in jobs["gpu"]["runs-on"]
    assert jobs["test"]["runs-on"] == "ubuntu-latest"


def test_workflow_commands_exist_in_the_project(default_bake: Path) -> None:
    project = default_bake
    targets = makefile_targets(project)
    used = set()
    for command in run_commands(project):
        for line in command.split("&&"):
            words = shlex.split(line)
            if words[0] == "make":
                target, *assignments = words[1:]
                assert target in targets, f"workflow runs `{line.strip()}`: no target {target!r} in the Makefile"
                assert make(project, "--dry-run", target, *assignments).returncode == 0
                used.add(target)
            else:
                assert words[0] in {"python", "echo", "nvidia-smi", "cruft"}, f"unexpected command {line!r}"
    assert {"lint", "install", "test"} <= used


@pytest.mark.parametrize("python_version", ["3.10", "3.13"])
def test_workflow_tests_on_the_oldest_supported_python(baked: Baked, tmp_path: Path, python_version: str) -> None:
    project = baked(python_version=python_version)
    (step,) = [step for step in workflow(project)["jobs"]["test"]["steps"] if step.get("id") == "python"]
    output = tmp_path / "github_output"
    env = {**os.environ, "GITHUB_OUTPUT": str(output)}
    subprocess.run(["bash", "-c", step["run"]], cwd=project, env=env, check=True)
    assert output.read_text() == f"version={python_version}\n"


def test_workflow_tests_with_every_extra(default_bake: Path) -> None:
    """No test skips in CI for a missing extra (the trackers' presets, the finder's plot); CPU-only torch."""
    project = default_bake
    steps = workflow(project)["jobs"]["test"]["steps"]
    runs = [shlex.split(step["run"]) for step in steps if "run" in step]
    (install,) = [words for words in runs if words[:2] == ["make", "install"]]
    settings = dict(word.split("=", 1) for word in install[2:])
    declared = tomllib.loads((project / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(settings["EXTRAS"].split(",")) == sorted(declared)
    assert settings["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"  # CPU-only torch, not 4 GB of CUDA
    dry_run = make(project, "--dry-run", *install[1:]).stdout
    assert f'pip install --editable ".[{settings["EXTRAS"]}]"' in dry_run
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in dry_run
    assert runs.index(install) < runs.index(["make", "test"])


def test_makefile_help_lists_every_target(default_bake: Path) -> None:
    project = default_bake
    result = make(project)  # the default goal
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^  make (\S+)", result.stdout, re.MULTILINE))
    assert listed == makefile_targets(project)
    assert {"install", "lint", "test", "train", "debug", "validate", "predict", "export"} <= listed


def test_makefile_commands_use_the_package_and_existing_files(baked: Baked) -> None:
    project = baked(project_name="Tool Check")
    for target in makefile_targets(project) - {"help"}:
        result = make(project, "--dry-run", target, "INPUTS=inputs/")
        assert result.returncode == 0, result.stderr
        for path in re.findall(r"\bconfigs/\S+\.yaml", result.stdout):
            assert (project / path).is_file(), f"make {target} uses missing {path}"
    debug = make(project, "--dry-run", "debug").stdout
    assert f"{sys.executable} -m tool_check fit -c configs/debug/tiny.yaml" in debug
    train = make(project, "--dry-run", "train", "CONFIG=configs/example/transformer.yaml").stdout
    assert f"{sys.executable} -m tool_check fit -c configs/example/transformer.yaml" in train
    predict = make(project, "--dry-run", "predict", "INPUTS=inputs/").stdout
    assert "-c configs/predict/writer.yaml --ckpt_path best" in predict
    assert "--data.init_args.predict_path inputs/" in predict


def test_make_lint_passes_on_a_fresh_project(baked: Baked) -> None:
    result = make(baked(), "lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_template_repository_is_ruff_clean() -> None:
    """Its own code (bench/, scripts/, hooks/, tests/): what `make lint` checks here, which `make test` must hold."""
    for args in (["check", "."], ["format", "--check", "."]):
        result = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_pre_commit_hooks_and_the_files_they_check(default_bake: Path) -> None:
    project = default_bake
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: repo for repo in config["repos"] for hook in repo["hooks"]}
    expected = {"ruff-check", "ruff-format", "check-yaml", "check-toml", "end-of-file-fixer", "trailing-whitespace"}
    assert expected <= set(hooks)
    # What the basic hooks would change or reject on the first `pre-commit run --all-files`: nothing.
    for name in files_of(project):
        text = (project / name).read_text(encoding="utf-8")
        assert text.endswith("\n"), f"{name}: no final newline"
        assert not text.endswith("\n\n"), f"{name}: blank lines at the end"
        assert not re.search(r"[ \t]+$", text, re.MULTILINE), f"{name}: trailing whitespace"
        if name.endswith((".yaml", ".yml")):
            yaml.safe_load(text)
        if name.endswith(".toml"):
            tomllib.loads(text)


def test_ci_pre_commit_and_the_dev_extra_run_one_ruff(default_bake: Path) -> None:
    project = default_bake
    pinned = re.search(r"^ruff==(\S+)$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    assert pinned, "ruff is pinned in constraints.txt"
    version = pinned.group(1)  # the ruff that this repository's tests lint the bakes with
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    revs = {repo["rev"] for repo in config["repos"] for hook in repo["hooks"] if hook["id"].startswith("ruff")}
    assert revs == {f"v{version}"}
    installs = [words for words in map(shlex.split, run_commands(project)) if words[-1].startswith("ruff")]
    assert [words[-1] for words in installs] == [f"ruff=={version}"]  # the lint job's one ruff
    dev = tomllib.loads((project / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert [requirement for requirement in dev if requirement.startswith("ruff")] == [f"ruff=={version}"]


@pytest.mark.parametrize("script", ["scripts/torchrun.sh", "scripts/slurm.sbatch", "scripts/sweep.sbatch"])
def test_launch_scripts_are_valid_executable_bash(default_bake: Path, script: str) -> None:
    path = default_bake / script
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    lines = path.read_text().splitlines()
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    # sbatch reads #SBATCH lines only before the first command.
    assert not [line for line in lines[first_command:] if line.startswith("#SBATCH")]


def test_the_mlflow_server_environment_serves_a_plain_mlflow_server() -> None:
    """What `make setup` builds from runkit/tests/mlflow-server.txt imports what a plain `mlflow server` loads:
    uvicorn's app (the AI gateway's aiohttp, numpy, pandas), the UI's GraphQL schema (graphene), the job runner."""
    mlflow = os.environ.get("MLFLOW_SERVER") or str(ROOT / ".venv-mlflow" / "bin" / "mlflow")
    if not Path(mlflow).is_file():
        pytest.skip("no MLflow server environment: `make setup` builds .venv-mlflow")
    modules = "mlflow.server.fastapi_app, mlflow.server.graphql.graphql_schema_extensions, huey"
    result = subprocess.run(
        [str(Path(mlflow).parent / "python"), "-c", f"import {modules}"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
