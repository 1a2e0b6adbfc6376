"""Generated projects follow the template with cruft: create, check, and update a project that has local edits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SMOKE_TESTS, assert_tests_pass, committed_template, cruft, cruft_create, edit, git, install

# A combination of answers whose generated suite runs nowhere else (see test_matrix.py).
ANSWERS = {"project_name": "Cruft Follower", "license": "Proprietary", "python_version": "3.13"}


@pytest.fixture
def template(tmp_path: Path) -> Path:
    """A git repository holding a copy of this template's working tree, committed."""
    return committed_template(tmp_path / "template", "template v1")


@pytest.mark.slow
def test_cruft_update_brings_a_template_change_into_an_edited_project(template: Path, tmp_path: Path) -> None:
    cruft_create(template, tmp_path / "projects", ANSWERS)
    project = tmp_path / "projects" / "cruft-follower"
    assert json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]["license"] == "Proprietary"
    git(project, "init", "--quiet", "--initial-branch=main")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message=baked")
    assert cruft(project, "check").returncode == 0  # up to date

    # The team edits its project; the template moves on, in the same file.
    edit(project / "configs/default.yaml", "  max_epochs: 10\n", "  max_epochs: 12\n")
    git(project, "commit", "--quiet", "--all", "--message=train longer")
    edit(
        template / "{{cookiecutter.project_slug}}/configs/default.yaml",
        "  log_every_n_steps: 10\n",
        "  log_every_n_steps: 50\n",
    )
    git(template, "commit", "--quiet", "--all", "--message=template v2: log less often")

    checked = cruft(project, "check")
    assert checked.returncode == 1
    assert "out of date" in checked.stdout
    updated = cruft(project, "update", "--skip-apply-ask")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    config = (project / "configs/default.yaml").read_text()
    assert "  max_epochs: 12\n" in config  # the local edit is kept
    assert "  log_every_n_steps: 50\n" in config  # the template change arrived
    assert cruft(project, "check").returncode == 0

    # The updated project still passes its own tests (a slice: see SMOKE_TESTS).
    with install(project):
        assert_tests_pass(project, *SMOKE_TESTS)
