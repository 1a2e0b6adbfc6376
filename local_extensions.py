"""Jinja filters of this template, loaded by cookiecutter through ``_extensions`` in cookiecutter.json."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from cookiecutter.config import BUILTIN_ABBREVIATIONS
from cookiecutter.repository import expand_abbreviations, is_repo_url
from cookiecutter.utils import simple_filter

# TOML basic strings must escape these; every other character stays as it is (the file is UTF-8).
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


@simple_filter
def toml_string(value: str) -> str:
    """``value`` as a TOML basic string, e.g. ``description = {{ cookiecutter.description | toml_string }}``.

    Jinja's ``tojson`` is not TOML: it writes a character outside the Basic Multilingual Plane (an emoji) as a
    JSON surrogate pair (``\\ud83d\\ude00``), which TOML rejects.
    """
    escaped = "".join(
        _ESCAPES.get(char, f"\\u{ord(char):04x}" if ord(char) < 0x20 or ord(char) == 0x7F else char)
        for char in str(value)
    )
    return f'"{escaped}"'


LIBRARY = "runkit"
"""The library every project installs: its folder in this repository (``runkit/``) and its distribution name."""
RELEASE: str = tomllib.loads((Path(__file__).parent / LIBRARY / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"
]["version"]
"""runkit's version in this template's commit (``runkit/pyproject.toml``), the newest in its CHANGELOG."""
_MAJOR, _MINOR = (int(part) for part in RELEASE.split(".")[:2])
INDEX_RANGE = f"runkit>={_MAJOR}.{_MINOR},<{_MAJOR}.{_MINOR + 1}"
"""What a project names when the team installs runkit from a package index: this release's minor (semver: a minor
may add, a removal warns for one minor first)."""


@simple_filter
def runkit_requirement(cookiecutter: dict[str, object]) -> str:
    """The project's requirement on runkit: the ``runkit_requirement`` answer, or for ``auto`` where this template came
    from, so the project installs the runkit of the very template commit it was made from.

    - through cruft (``_commit`` set): ``runkit @ git+<url>@<commit>#subdirectory=runkit``, a local template's
      ``file://localhost/`` URL included; ``cruft update`` moves the commit;
    - from a git URL with cookiecutter: the same at ``--checkout``'s tag, or else at the clone's commit (a branch
      would move under the project);
    - from a local checkout whose commit a remote of it has (a clone of the team's repository, pushed): the same at
      that commit, from the remote's URL, so the project installs on a colleague's machine too;
    - from any other local checkout: ``runkit @ file:///<checkout>/runkit``, a folder of this machine (the hook's
      next steps say what to change before sharing the project);
    - ``index``: ``INDEX_RANGE`` (``runkit>=0.2,<0.3`` for runkit 0.2.x) from the package index the team publishes
      it to.
    """
    answer = str(cookiecutter.get("runkit_requirement", "auto"))
    if answer == "index":
        return INDEX_RANGE
    if answer != "auto":
        return answer
    template = str(cookiecutter.get("_template", "."))
    if commit := cookiecutter.get("_commit"):  # cruft: its template is a URL, or a local repository's absolute path
        return _at_commit(template, str(commit))
    # _repo_dir: the folder cookiecutter renders from, its clone of a URL; a local path as given, maybe relative to a
    # folder that rendering has left (it runs inside the template's folder), where this file's own folder is the one.
    folder = Path(str(cookiecutter.get("_repo_dir", "")))
    if not folder.is_absolute():
        folder = Path(__file__).resolve().parent
    if is_repo_url(expand_abbreviations(template, BUILTIN_ABBREVIATIONS)):
        return _at_commit(template, _pin(folder, cookiecutter.get("_checkout")))
    if remote := _remote_at_commit(folder):
        return _at_commit(*remote)
    return f"{LIBRARY} @ {folder.resolve().as_uri()}/{LIBRARY}"


def _remote_at_commit(clone: Path) -> tuple[str, str] | None:
    """The URL of a remote of ``clone`` that has its checked-out commit (one of its remote-tracking branches holds
    it), and that commit; ``None`` where no remote has it (none set, or the commit not pushed)."""
    commit = _git(clone, "rev-parse", "HEAD")
    refs = _git(clone, "for-each-ref", "--contains", commit, "--format=%(refname)", "refs/remotes") if commit else ""
    for ref in refs.splitlines():
        name = ref.removeprefix("refs/remotes/").split("/")[0]
        if url := _git(clone, "remote", "get-url", name):
            return url, commit
    return None


def _at_commit(template: str, ref: str) -> str:
    """The requirement on runkit in the git repository ``template`` (a URL, an abbreviation or a path) at ``ref``."""
    url = expand_abbreviations(template, BUILTIN_ABBREVIATIONS).removeprefix("git+")
    if scp := re.fullmatch(r"([\w.-]+@[\w.-]+):(?!//)(.+)", url):  # git@host:org/repo.git, which pip does not read
        url = f"ssh://{scp[1]}/{scp[2]}"
    elif not is_repo_url(url):  # cruft's local template: an absolute path
        url = Path(url).resolve().as_uri()
    # A host for a local repository: pip 23.2 (what Python 3.11's venv brings) refuses a dependency on a git+file URL
    # that has none ("Invalid URL"), and git reads file://localhost/ as file:///.
    url = re.sub(r"^file:///", "file://localhost/", url)
    return f"{LIBRARY} @ git+{url}@{ref}#subdirectory={LIBRARY}"


def _pin(clone: Path, checkout: object) -> str:
    """What a project pins in cookiecutter's ``clone``: ``checkout`` where it is a tag, else the commit checked out."""
    if checkout and _git(clone, "rev-parse", "--verify", "--quiet", f"refs/tags/{checkout}"):
        return str(checkout)
    if commit := _git(clone, "rev-parse", "HEAD"):
        return commit
    raise ValueError(f"{clone} is no git checkout: answer runkit_requirement=index, or a requirement on runkit")


def _git(repo: Path, *args: str) -> str:
    """git's output in ``repo``; empty where git fails or is not installed."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError:  # no git: a local checkout is then named by its folder
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
