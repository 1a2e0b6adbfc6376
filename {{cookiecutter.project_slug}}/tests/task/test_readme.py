"""The README's practice map points at files and tests that exist."""

from __future__ import annotations

import re

from support import PACKAGE, ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_referenced_file_exists() -> None:
    paths = set(re.findall(r"`?((?:<pkg>|configs|tests|scripts|bench)/[\w./-]+\.(?:py|yaml|sh|sbatch))", README))
    assert len(paths) > 40
    missing = [path for path in paths if not (ROOT / path.replace("<pkg>", f"src/{PACKAGE}")).is_file()]
    assert missing == []


def test_every_referenced_test_exists() -> None:
    # In a cell, `tests/test_x.py::name` and every `::other` after it (until the next file) name test functions.
    references = []
    for cell in re.findall(r"tests/test_\w+\.py::[^|\n]*", README):
        path = ""
        for token in re.findall(r"tests/test_\w+\.py|::\w+", cell):
            if token.startswith("::"):
                references.append((path, token[2:]))
            else:
                path = token
    assert len(references) > 40
    missing = [f"{path}::{name}" for path, name in references if f"def {name}(" not in (ROOT / path).read_text()]
    assert missing == []
