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


def launch(
    package: str, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m <package> *args`` in ``cwd``; stdout and stderr together are the result's ``stdout``.

    ``tests/`` is on ``PYTHONPATH``, so callbacks of ``probes.py`` and ``faults.py`` named on the command line
    import in every process (DDP ones too). Output goes to ``cwd/out.log``, not a pipe: DataLoader workers of
    a killed process hold a pipe open until they notice their parent is gone, which would keep the caller waiting.
    """
    path = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore", **(env or {})}
    log = cwd / "out.log"
    with open(log, "w") as out:
        process = subprocess.run(
            [sys.executable, "-m", package, *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
            timeout=timeout,
        )
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), "")


@pytest.fixture
def run_process(in_tmp: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs ``python -m <package>`` in a fresh process and returns the finished process."""
    return lambda *args, timeout=300: launch(PACKAGE, *args, cwd=in_tmp, timeout=timeout)


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
