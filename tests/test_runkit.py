"""runkit, the library every generated project installs, passes its own suite once here (its long tests marked
``faults`` are ``make test-faults``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_runkit_passes_its_whole_suite() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--numprocesses", "2"],
        cwd=ROOT / "runkit",
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        capture_output=True,
        text=True,
        timeout=5400,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
