"""Fixtures of the example task's tests: its modules, and the command line run on the project's configs."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from support import CONFIGS, PACKAGE, launch, submodule


def config_flags(*presets: str) -> list[str]:
    """``--config`` flags for presets named by their path under ``configs/`` without ``.yaml`` (``debug/tiny``)."""
    return [f"--config={CONFIGS / f'{name}.yaml'}" for name in presets]


@pytest.fixture(scope="session")
def networks() -> ModuleType:
    return submodule("task.networks")


@pytest.fixture(scope="session")
def gratings() -> ModuleType:
    return submodule("task.gratings")


@pytest.fixture(scope="session")
def classifier() -> ModuleType:
    return submodule("task.classifier")


@pytest.fixture(scope="session")
def cli() -> ModuleType:
    return submodule("kit.cli")


@pytest.fixture
def run_cli(cli: ModuleType, in_tmp: Path) -> Callable[..., object]:
    """Runs the CLI in this process on ``configs/default.yaml`` (always loaded) plus presets, and returns it."""

    def run(*args: str, presets: tuple[str, ...] = ("debug/tiny",)) -> object:
        subcommand, *rest = args
        return cli.build_cli([subcommand, *config_flags(*presets), "--trainer.enable_progress_bar=false", *rest])

    return run


@pytest.fixture
def run_process(in_tmp: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs ``python -m <package>`` in a fresh process and returns the finished process."""
    return lambda *args, timeout=300: launch(PACKAGE, *args, cwd=in_tmp, timeout=timeout)
