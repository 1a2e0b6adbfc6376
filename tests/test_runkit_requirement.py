"""The requirement on runkit a generation writes into pyproject.toml, for each way a team gets the template: a git
URL at a tag or a branch, a local checkout, cruft, a package index (``make test-installs`` installs each for real)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import jinja2
import pytest
from conftest import ROOT, committed_template, cruft, git
from packaging.requirements import Requirement

TAG = "runkit-v0.2.0"


def pip_url(repository: Path) -> str:
    """A local repository's URL as pip reads it in a dependency (pip 23.2 refuses a git+file URL without a host)."""
    return repository.as_uri().replace("file:///", "file://localhost/")


def requirement(project: Path) -> str:
    """The project's one dependency on runkit, as written."""
    dependencies = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (line,) = [line for line in dependencies if line.startswith("runkit")]
    if link := Requirement(line).url:  # pip 23.2 (Python 3.11's venv) refuses a URL without a host but for file:
        assert urlparse(link).scheme == "file" or urlparse(link).netloc, f"{line}: pip 23.2 refuses this URL"
    return line


@pytest.fixture
def generate(tmp_path: Path) -> Callable[..., Path]:
    """Runs the cookiecutter command on a template with ``options``, from a folder of its own; the project made."""
    # Its own clones' folder and replay folder: nothing under the home directory is read or written.
    config = tmp_path / "cookiecutter.yaml"
    config.write_text(json.dumps({"cookiecutters_dir": str(tmp_path / "clones"), "replay_dir": str(tmp_path / "re")}))

    def generate(template: str, *options: str, cwd: Path = tmp_path) -> Path:
        output = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
        command = [sys.executable, "-m", "cookiecutter", "--no-input", "--config-file", str(config)]
        done = subprocess.run(
            [*command, "--output-dir", str(output), template, *options], cwd=cwd, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        (output / "said.txt").write_text(done.stdout)  # the hook's next steps: beside the project, not in it
        (project,) = [path for path in output.iterdir() if path.is_dir()]
        return project

    return generate


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, str]:
    """A bare git repository of this working tree, committed, with the tag ``TAG`` and a later commit on main past
    it; the later commit."""
    work = committed_template(tmp_path / "work")
    git(work, "tag", TAG)
    git(work, "commit", "--quiet", "--allow-empty", "--message=after the tag")
    git(tmp_path, "clone", "--quiet", "--bare", str(work), "template.git")
    return tmp_path / "template.git", git(work, "rev-parse", "HEAD").strip()


def test_a_git_url_at_a_tag_pins_the_tag(generate: Callable[..., Path], repository: tuple[Path, str]) -> None:
    bare, _ = repository
    project = generate(bare.as_uri(), "--checkout", TAG)
    assert requirement(project) == f"runkit @ git+{pip_url(bare)}@{TAG}#subdirectory=runkit"


def test_a_git_url_at_a_branch_pins_its_commit(generate: Callable[..., Path], repository: tuple[Path, str]) -> None:
    bare, head = repository
    wanted = f"runkit @ git+{pip_url(bare)}@{head}#subdirectory=runkit"  # a commit: the branch moves on, the pin not
    assert requirement(generate(bare.as_uri(), "--checkout", "main")) == wanted
    assert requirement(generate(bare.as_uri())) == wanted
    # pip's spelling of the URL (git+file://) is cookiecutter's too, and is not doubled; from this repository's
    # folder, whose local_extensions.py Python finds first, the commit is still the clone's.
    assert requirement(generate(f"git+{bare.as_uri()}", cwd=ROOT)) == wanted


def said(project: Path) -> str:
    """What the generation printed (the hook's next steps)."""
    return (project.parent / "said.txt").read_text()


def test_a_checkout_no_remote_has_names_its_runkit_folder_and_says_what_to_change(
    generate: Callable[..., Path], tmp_path: Path
) -> None:
    work = committed_template(tmp_path / "work")  # no remote: a folder of this machine is all there is
    wanted = f"runkit @ {work.as_uri()}/runkit"
    project = generate(str(work))
    assert requirement(project) == wanted
    assert f"note: pyproject.toml installs runkit from this machine ({wanted})" in said(project)
    assert "runkit_requirement=" in said(project)
    assert requirement(generate(".", cwd=work)) == wanted  # `make main` (rendering runs in another folder)


def test_a_clone_whose_remote_has_its_commit_names_the_remote_at_that_commit(
    generate: Callable[..., Path], repository: tuple[Path, str], tmp_path: Path
) -> None:
    # A team's clone of its template repository: a colleague's machine reaches the remote, not this folder.
    bare, head = repository
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", str(bare), str(clone))
    git(clone, "remote", "set-url", "origin", "git@git.example.com:ml/template.git")
    project = generate(str(clone))
    assert requirement(project) == f"runkit @ git+ssh://git@git.example.com/ml/template.git@{head}#subdirectory=runkit"
    assert "note:" not in said(project)
    assert said(project).rstrip().endswith("make test")  # the README's test command (it said `pytest`)
    # A commit the remote does not have yet: the folder, and the note.
    git(clone, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "--quiet", "--allow-empty", "-m", "x")
    project = generate(str(clone))
    assert requirement(project) == f"runkit @ {clone.as_uri()}/runkit"
    assert "note: pyproject.toml installs runkit from this machine" in said(project)


def test_index_names_the_published_range_and_a_requirement_is_written_as_given(
    generate: Callable[..., Path],
) -> None:
    assert requirement(generate(str(ROOT), "runkit_requirement=index")) == "runkit>=0.2,<0.3"
    given = f"runkit @ git+https://git.example.com/ml/template.git@{TAG}#subdirectory=runkit"
    assert requirement(generate(str(ROOT), f"runkit_requirement={given}")) == given


def test_cruft_pins_the_commit_of_a_local_repository(tmp_path: Path, repository: tuple[Path, str]) -> None:
    bare, _ = repository
    (tmp_path / "projects").mkdir()
    created = cruft(tmp_path / "projects", "create", str(bare), "--checkout", TAG, "--no-input")
    assert created.returncode == 0, created.stderr
    (project,) = (tmp_path / "projects").iterdir()
    commit = json.loads((project / ".cruft.json").read_text())["commit"]
    # the repository cruft names in .cruft.json (not its scratch clone), at the commit it moves on `cruft update`
    assert requirement(project) == f"runkit @ git+{pip_url(bare)}@{commit}#subdirectory=runkit"
    assert commit == git(bare, "rev-parse", f"{TAG}^{{commit}}").strip()


@pytest.mark.parametrize(
    ("template", "url"),
    [
        ("https://github.com/org/template", "git+https://github.com/org/template"),
        ("gh:org/template", "git+https://github.com/org/template.git"),
        ("git@gitlab.example.com:ml/template.git", "git+ssh://git@gitlab.example.com/ml/template.git"),
        ("ssh://git@gitlab.example.com/ml/template.git", "git+ssh://git@gitlab.example.com/ml/template.git"),
    ],
)
def test_cruft_template_urls_are_written_as_pip_clones_them(template: str, url: str) -> None:
    spec = importlib.util.spec_from_file_location("local_extensions_under_test", ROOT / "local_extensions.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    render = jinja2.Environment(extensions=[module.runkit_requirement]).filters["runkit_requirement"]
    answers = {"runkit_requirement": "auto", "_template": template, "_commit": "0123abc"}
    assert render(answers) == f"runkit @ {url}@0123abc#subdirectory=runkit"
