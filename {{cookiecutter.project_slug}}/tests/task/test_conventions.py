"""Source conventions from the practice map that no single behaviour test would catch."""

from __future__ import annotations

import importlib
import re

import pytest
from support import PACKAGE, ROOT

SOURCES = sorted((ROOT / "src" / PACKAGE).rglob("*.py"))


def lines_matching(pattern: str) -> list[str]:
    regex = re.compile(pattern)
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in SOURCES
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if regex.search(line)
    ]


def test_sources_are_found() -> None:
    assert {"cli.py", "classifier.py", "networks.py"} <= {path.name for path in SOURCES}


def test_the_trainer_alone_picks_the_device() -> None:
    assert lines_matching(r"\.cuda\(|\.to\(\s*[\"']cuda|device\s*=\s*[\"']cuda") == []


def test_gradients_are_zeroed_by_the_loop_only() -> None:
    assert lines_matching(r"zero_grad") == []


def test_existing_data_is_wrapped_with_as_tensor() -> None:
    assert lines_matching(r"torch\.tensor\(") == []


def test_empty_tensors_are_written_right_after() -> None:
    uses = lines_matching(r"torch\.empty\(")
    assert uses, "gratings.py allocates its image buffer with torch.empty"
    assert all("written" in line for line in uses), uses


def test_entry_point_is_import_safe(capsys: pytest.CaptureFixture[str]) -> None:
    # Spawned DataLoader workers import the main module; it must not start a run when imported.
    importlib.import_module(f"{PACKAGE}.__main__")
    assert capsys.readouterr().err == ""
