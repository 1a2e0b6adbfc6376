"""runkit, the library every generated project installs, passes its own suite once here (its long tests marked
``faults`` are ``make test-faults``), in ``SHARDS`` parts that ``make test``'s two workers take like any other test:
one part per worker at a time, so neither waits while the other runs the whole suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DURATIONS, ROOT

SHARDS = 4
RUNKIT_TESTS = ROOT / "runkit" / "tests"
START_S = 8.0
"""What a part pays before its first test: a pytest process importing torch, Lightning and the suite's helpers."""


def weight(path: Path) -> float:
    """A test file's expected seconds: as measured (durations.json), else guessed from its size and its tests marked
    slow (processes, long runs) that ``make test`` runs (not marked faults too)."""
    if (seconds := DURATIONS["runkit/tests"].get(path.name)) is not None:
        return float(seconds)
    text = path.read_text(encoding="utf-8")
    return len(text) / 4000 + 10 * max(0, text.count("mark.slow") - text.count("mark.faults"))


def shards() -> list[list[str]]:
    """runkit's test files in ``SHARDS`` groups of about equal expected time, longest first (each to the group with the
    least so far); a file stays whole, so its module fixtures (a shared trained run, a DDP run) run once."""
    groups: list[list[str]] = [[] for _ in range(SHARDS)]
    loads = [0.0] * SHARDS
    for path in sorted(RUNKIT_TESTS.glob("test_*.py"), key=lambda path: (-weight(path), path.name)):
        lightest = loads.index(min(loads))
        groups[lightest].append(path.name)
        loads[lightest] += weight(path)
    return groups


def expected_seconds(item: pytest.Item) -> float:
    """A part's expected time (conftest orders the work by it); 1 s for the other tests here."""
    if not hasattr(item, "callspec"):
        return 1.0
    return START_S + sum(weight(RUNKIT_TESTS / name) for name in shards()[item.callspec.params["shard"]])


def test_the_shards_hold_every_test_file_once() -> None:
    held = [name for group in shards() for name in group]
    assert sorted(held) == sorted(path.name for path in RUNKIT_TESTS.glob("test_*.py"))
    assert all(shards())


def test_every_measured_file_and_test_exists() -> None:
    """durations.json names no test that is gone (a renamed one would be ordered as a short one, unnoticed)."""
    assert set(DURATIONS["runkit/tests"]) <= {path.name for path in RUNKIT_TESTS.glob("test_*.py")}
    for test in DURATIONS["tests"]:
        file, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / "tests" / file).read_text(encoding="utf-8"), test


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda shard: f"{shard + 1}of{SHARDS}")
def test_runkit_passes_its_whole_suite(shard: int) -> None:
    files = [f"tests/{name}" for name in shards()[shard]]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--numprocesses", "0", *files],
        cwd=ROOT / "runkit",
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=5400,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
