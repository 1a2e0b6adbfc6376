"""The post-generation hook makes a project a git repository with one commit of every file (runs record its commit),
and generation goes on, with one line, where git is missing or fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ROOT, bake, committed_template, cruft_create, git
from test_bake import files_of

Baked = Callable[..., Path]
IDENTITY = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


@pytest.fixture
def git_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A global git configuration of the test's own (empty: no identity, no default branch); no system one."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in IDENTITY:
        monkeypatch.delenv(name, raising=False)
    return config


def log(project: Path) -> list[str]:
    """Each commit as ``author | committer | branch | subject``."""
    fields = "%an <%ae> | %cn <%ce> | %D | %s"
    return subprocess.run(
        ["git", "log", f"--format={fields}"], cwd=project, capture_output=True, text=True, check=True
    ).stdout.splitlines()


def tracked(project: Path) -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=project, capture_output=True, text=True, check=True).stdout
    return set(listed.splitlines())


def cookiecutter_cli(output_dir: Path, path: str) -> subprocess.CompletedProcess[str]:
    """Generation with the default answers, in a process whose PATH is ``path``."""
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(output_dir), str(ROOT)]
    env = {**os.environ, "PATH": path}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.usefixtures("git_config")
def test_a_project_is_a_repository_of_its_files_in_one_commit_by_the_answers_author(baked: Baked) -> None:
    project = baked(project_name="Crack Finder", author_name="Ada Lovelace", email="ada@example.org")
    ada = "Ada Lovelace <ada@example.org>"
    assert log(project) == [f"{ada} | {ada} | HEAD -> main | Generate Crack Finder"]
    assert tracked(project) == files_of(project)
    assert len(files_of(project)) > 60
    assert git(project, "status", "--porcelain") == ""  # what a run records: the commit, not dirty


def test_the_git_users_identity_and_default_branch_are_kept(baked: Baked, git_config: Path) -> None:
    git_config.write_text("[user]\n\tname = Team CI\n\temail = ci@example.com\n[init]\n\tdefaultBranch = trunk\n")
    project = baked(author_name="Ada Lovelace")
    assert log(project) == [
        "Team CI <ci@example.com> | Team CI <ci@example.com> | HEAD -> trunk | Generate Image Classifier"
    ]


@pytest.mark.usefixtures("git_config")
@pytest.mark.parametrize("case", ["no git", "commit fails"])
def test_generation_goes_on_with_one_line_without_git(tmp_path: Path, case: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if case == "commit fails":  # as a commit fails when signing is required and no key answers
        real = shutil.which("git")
        script = 'for a in "$@"; do [ "$a" = commit ] && { echo "error: gpg failed" >&2; exit 128; }; done\n'
        (bin_dir / "git").write_text(f'#!/bin/sh\n{script}exec {real} "$@"\n')
        (bin_dir / "git").chmod(0o755)
    result = cookiecutter_cli(tmp_path / "out", str(bin_dir))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    reason = "git is not installed" if case == "no git" else "git commit: error: gpg failed"
    assert warnings == [f"warning: {reason}: the project is no git repository (`git init` makes it one)"]
    project = tmp_path / "out" / "image-classifier"
    assert not (project / ".git").exists()  # no half-made repository
    assert len(files_of(project)) > 60


@pytest.mark.usefixtures("git_config")
def test_no_repository_of_its_own_inside_another_work_tree(tmp_path: Path) -> None:
    monorepo = tmp_path / "monorepo"
    monorepo.mkdir()
    git(monorepo, "init", "--quiet")
    project = bake(monorepo / "vision")
    assert not (project / ".git").exists()
    assert git(monorepo, "status", "--porcelain") == "?? vision/\n"  # the project is the monorepo's to commit


@pytest.mark.usefixtures("git_config")
def test_no_repository_under_cruft(tmp_path: Path) -> None:
    """cruft writes .cruft.json after the hook, and renders the template twice to diff them in `cruft update`."""
    template = committed_template(tmp_path / "template")
    cruft_create(template, tmp_path / "projects", {"project_name": "Cruft Made"})
    project = tmp_path / "projects" / "cruft-made"
    assert (project / ".cruft.json").is_file()
    assert not (project / ".git").exists()
