"""Shared fixtures. The package is found under ``src/``, so these tests need no edit when it is renamed."""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
(PACKAGE,) = [path.name for path in (ROOT / "src").iterdir() if (path / "__init__.py").is_file()]


def _submodule(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


@pytest.fixture(scope="session")
def networks() -> ModuleType:
    return _submodule("networks")


@pytest.fixture(scope="session")
def data() -> ModuleType:
    return _submodule("data")


@pytest.fixture(scope="session")
def synthetic() -> ModuleType:
    return _submodule("synthetic")


@pytest.fixture(scope="session")
def schedules() -> ModuleType:
    return _submodule("schedules")


@pytest.fixture(scope="session")
def module() -> ModuleType:
    return _submodule("module")


@pytest.fixture(scope="session")
def cli() -> ModuleType:
    return _submodule("cli")


@pytest.fixture(autouse=True)
def _restore_deterministic_algorithms() -> Iterator[None]:
    """``Trainer(deterministic=True)`` switches the whole process to deterministic algorithms: undo it."""
    enabled = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(enabled)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs the test inside an empty directory, so relative run directories land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def run_cli(cli: ModuleType, in_tmp: Path) -> Callable[..., object]:
    """Runs the CLI in this process with the default config (plus presets) and returns it."""

    def run(*args: str, presets: tuple[str, ...] = ("debug",)) -> object:
        configs = [f"--config={CONFIGS / f'{name}.yaml'}" for name in ("default", *presets)]
        subcommand, *rest = args
        return cli.build_cli([subcommand, *configs, "--trainer.enable_progress_bar=false", *rest])

    return run


@pytest.fixture
def run_process(in_tmp: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs ``python -m <package>`` in a fresh process and returns the finished process."""

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        return subprocess.run(
            [sys.executable, "-m", PACKAGE, *args], capture_output=True, text=True, timeout=timeout, env=env
        )

    return run


@pytest.fixture
def lightning_log() -> Iterator[list[str]]:
    """Messages of Lightning's logger (it does not propagate to pytest's log capture)."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)
