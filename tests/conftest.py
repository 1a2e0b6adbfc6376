"""Baking helpers shared by the template's tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"


def bake(output_dir: Path, **answers: str) -> Path:
    """Generates a project with the default answers overridden by ``answers``; returns its directory."""
    return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(output_dir), extra_context=answers))


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--quiet", *args], check=True)


@pytest.fixture
def baked(tmp_path: Path) -> Callable[..., Path]:
    return lambda **answers: bake(tmp_path, **answers)


@pytest.fixture
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Path]]:
    """Bakes and installs (editable, against this environment's pinned stack) projects; uninstalls them after."""
    slugs = []

    def make(**answers: str) -> Path:
        project = bake(tmp_path_factory.mktemp("bake"), **answers)
        pip("install", "--no-deps", "--no-build-isolation", "--editable", str(project))
        slugs.append(project.name)
        return project

    yield make
    if slugs:
        pip("uninstall", "--yes", *slugs)


def run_tests(project: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    """Runs a generated project's own test suite in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=3600,
    )
