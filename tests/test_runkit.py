"""runkit, the library every generated project installs, passes its own suite once here (its long tests marked
``faults`` are ``make test-faults``), in ``SHARDS`` parts that ``make test``'s two workers take like any other test:
one part per worker at a time, so neither waits while the other runs the whole suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SHARDS = 4
RUNKIT_TESTS = ROOT / "runkit" / "tests"


def weight(path: Path) -> int:
    """A test file's expected cost: its size, and much more for each test marked slow (processes, long runs) that
    ``make test`` runs (not marked faults too)."""
    text = path.read_text(encoding="utf-8")
    return len(text) + 20_000 * max(0, text.count("mark.slow") - text.count("mark.faults"))


def shards() -> list[list[str]]:
    """runkit's test files in ``SHARDS`` groups of about equal weight, heaviest first; a file stays whole, so its
    module fixtures (a shared trained run, a DDP run) run once."""
    groups: list[list[str]] = [[] for _ in range(SHARDS)]
    loads = [0] * SHARDS
    for path in sorted(RUNKIT_TESTS.glob("test_*.py"), key=lambda path: (-weight(path), path.name)):
        lightest = loads.index(min(loads))
        groups[lightest].append(path.name)
        loads[lightest] += weight(path)
    return groups


def test_the_shards_hold_every_test_file_once() -> None:
    held = [name for group in shards() for name in group]
    assert sorted(held) == sorted(path.name for path in RUNKIT_TESTS.glob("test_*.py"))
    assert all(shards())


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
