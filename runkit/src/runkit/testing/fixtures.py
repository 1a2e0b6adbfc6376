"""A pytest plugin for runkit projects' tests and the kit's own (``pytest_plugins = ["runkit.testing.fixtures"]``):
an empty working directory, Lightning's log, and process-wide state put back after each test.

Tests marked ``faults`` (long: the kit's fault matrix beyond its slice, an MLflow server on PostgreSQL, ...) run only
with ``--faults`` (``make test-faults``). Tests marked ``gpu`` need a CUDA GPU: they skip without one, and
``make test-gpu`` runs them all. Tests marked ``slow`` run too (CI runs them); ``-m "not slow"`` leaves them out.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


def as_from_a_terminal() -> None:
    """Takes SIGINT and SIGHUP back where this process started with them ignored (``make test &`` in a script,
    ``nohup make test``): runkit keeps a signal that was ignored at start ignored, and the processes a test starts
    inherit that, so the tests that send them would see nothing happen. The tests run as from a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_configure(config: pytest.Config) -> None:
    as_from_a_terminal()
    for marker in (
        "slow: multi-process, compiled or long runs (CI runs them too)",
        "faults: long tests `make test` leaves out (run them with --faults: make test-faults)",
        "gpu: needs a CUDA GPU; skipped without one (make test-gpu runs them all)",
    ):
        config.addinivalue_line("markers", marker)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--faults", action="store_true", help="also run the whole fault matrix (tests marked faults)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (make test-gpu runs every such test)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    if config.getoption("--faults"):
        return
    kept = [item for item in items if item.get_closest_marker("faults") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def _restore_deterministic_algorithms() -> Iterator[None]:
    """``Trainer(deterministic=True)`` switches the whole process to deterministic algorithms: undo it."""
    enabled = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(enabled)


@pytest.fixture(autouse=True)
def _restore_matmul_precision_and_autotuning() -> Iterator[None]:
    """``MatmulPrecision`` and ``Trainer(benchmark=...)`` set process-wide switches: put them back."""
    precision, benchmark = torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark
    yield
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.benchmark = benchmark


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs the test inside an empty directory, so relative run directories land there."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def lightning_log() -> Iterator[list[str]]:
    """Messages of Lightning's logger (it does not propagate to pytest's log capture).

    Also ``pytorch_lightning``'s: once a test imports that package (Lightning's former name), its ``rank_zero`` module
    points the logger ``rank_zero_info`` writes to, shared through ``lightning_utilities``, at its own name.
    """
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "pytorch_lightning")]
    for logger in loggers:
        logger.addHandler(handler)
    yield lines
    for logger in loggers:
        logger.removeHandler(handler)
