"""Every combination of cookiecutter.json's choices bakes lint-clean; some also pass the generated tests.

The choices change only metadata (LICENSE, license and requires-python in pyproject.toml, ruff's target
version), never the code, so each combination is linted (ruff's rules depend on the target version) and
every choice runs generated tests in at least one bake: MIT/3.10 and BSD-3-Clause/3.11 (test_generated.py),
Proprietary/3.13 (test_cruft.py) and Apache-2.0/3.12 (here).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import ROOT, SMOKE_TESTS, assert_tests_pass, bake, install
from test_bake import LEFTOVER_JINJA, files_of, ruff

# The prompts with a fixed set of answers (lists, and booleans); free-text prompts are tested in test_bake.py.
CHOICES = {
    key: [True, False] if isinstance(value, bool) else value
    for key, value in json.loads((ROOT / "cookiecutter.json").read_text()).items()
    if not key.startswith("_") and isinstance(value, (list, bool))
}
COMBINATIONS = [dict(zip(CHOICES, values, strict=True)) for values in itertools.product(*CHOICES.values())]


def name(answers: dict[str, object]) -> str:
    return "-".join(str(value) for value in answers.values())


def test_the_matrix_is_every_combination() -> None:
    assert set(CHOICES) == {"license", "python_version"}  # a new choice joins the matrix by itself
    assert len(COMBINATIONS) == 16
    assert len({name(answers) for answers in COMBINATIONS}) == 16


@pytest.mark.parametrize("answers", COMBINATIONS, ids=name)
def test_combination_bakes_ruff_clean(tmp_path: Path, answers: dict[str, str]) -> None:
    project = bake(tmp_path, **answers)
    for file in files_of(project):
        assert not LEFTOVER_JINJA.search((project / file).read_text(encoding="utf-8")), f"unrendered Jinja in {file}"
    for args in (["check", "."], ["format", "--check", "."]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_combination_passes_generated_tests(tmp_path: Path) -> None:
    project = bake(tmp_path, project_name="Matrix Apache", license="Apache-2.0", python_version="3.12")
    with install(project):
        assert_tests_pass(project, *SMOKE_TESTS)
