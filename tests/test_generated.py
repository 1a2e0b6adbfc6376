"""Baked projects install against the pinned stack and pass their own test suites."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import SMOKE_RUN, SMOKE_TESTS, assert_tests_pass


@pytest.mark.slow
def test_default_project_passes_its_whole_suite(installed: Callable[..., Path]) -> None:
    assert_tests_pass(installed(), "--numprocesses", "2")  # as its `make test` does, on CI's 2 cores


@pytest.mark.slow
def test_non_default_project_passes_its_smoke_slice(installed: Callable[..., Path]) -> None:
    # The code is the same as the default bake's, whose whole suite runs above: the slice shows a non-ASCII
    # name, another license and Python reach a working package, within CI's time budget.
    project = installed(project_name="Über Vision 2", license="BSD-3-Clause", python_version="3.11")
    assert_tests_pass(project, *SMOKE_TESTS, SMOKE_RUN)  # its console script trains, stops, resumes, validates
