"""Baked projects install against the pinned stack and pass their own test suites."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_tests


@pytest.mark.slow
def test_default_project_passes_its_whole_suite(installed: Callable[..., Path]) -> None:
    result = run_tests(installed())
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout


@pytest.mark.slow
def test_non_default_project_passes_its_fast_suite(installed: Callable[..., Path]) -> None:
    project = installed(project_name="Über Vision 2", license="BSD-3-Clause", python_version="3.11")
    result = run_tests(project, "-m", "not slow")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout
