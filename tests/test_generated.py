"""The default bake installs against the pinned stack and passes its whole suite. (A non-default bake, with its example
replaced, passes its whole suite in test_replace_example.py; others run a slice: test_matrix.py, test_cruft.py.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import assert_tests_pass


@pytest.mark.slow
def test_default_project_passes_its_whole_suite(installed: Callable[..., Path]) -> None:
    assert_tests_pass(installed(), "--numprocesses", "2")  # as its `make test` does, on CI's 2 cores
