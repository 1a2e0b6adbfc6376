"""Bad answers are rejected before anything is written, with a message naming the problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


def cookiecutter_cli(output_dir: Path, *answers: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(output_dir), str(ROOT)]
    return subprocess.run([*command, *answers], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (["project_name="], "project_name is empty"),
        (["project_name=   "], "project_name is empty"),
        (["author_name="], "author_name is empty"),
        (["package_name=3d_vision"], "package_name '3d_vision' is not an ASCII Python identifier"),
        (["package_name=my-package"], "package_name 'my-package' is not an ASCII Python identifier"),
        (["package_name=données"], "package_name 'données' is not an ASCII Python identifier"),
        (["package_name=class"], "package_name 'class' is a Python keyword"),
        (["package_name=match"], "package_name 'match' is a Python keyword"),
        (["package_name=MyPackage"], "package_name 'MyPackage' must be lowercase"),
        (["package_name=typing"], "would shadow the standard-library module 'typing'"),
        (["package_name=test"], "would shadow the standard-library module 'test'"),
        (["package_name=torch"], "would shadow the dependency or folder 'torch'"),
        (["package_name=lightning"], "would shadow the dependency or folder 'lightning'"),
        (["project_slug=Bad Slug"], "project_slug 'Bad Slug' is not a valid distribution name"),
        (["project_name=!!!"], "project_name '!!!' has no letters or digits"),
        (["email=nobody"], "email 'nobody' is not an e-mail address"),
        (["python_version=3.8"], "3.8 provided for choice variable python_version"),
        (["license=GPL"], "GPL provided for choice variable license"),
    ],
)
def test_bad_answer_is_rejected(tmp_path: Path, answers: list[str], message: str) -> None:
    result = cookiecutter_cli(tmp_path, *answers)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    result = cookiecutter_cli(tmp_path, "package_name=class", "email=x")
    assert "package_name 'class' is a Python keyword" in result.stderr
    assert "email 'x' is not an e-mail address" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["Über Vision", "数据 项目", "  spaced   out  ", "résumé-ranker 2"])
def test_unicode_and_spaces_give_a_valid_slug_and_package(tmp_path: Path, name: str) -> None:
    result = cookiecutter_cli(tmp_path, f"project_name={name}")
    assert result.returncode == 0, result.stderr
    (project,) = tmp_path.iterdir()
    (package,) = (project / "src").iterdir()
    assert package.name.isidentifier()
    assert package.name.isascii()
    assert project.name == package.name.replace("_", "-")
