"""Jinja filters of this template, loaded by cookiecutter through ``_extensions`` in cookiecutter.json."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
INDEX_RANGE = "runkit>=0.1,<0.2"
"""What a project names when the team installs runkit from a package index."""


@simple_filter
def runkit_requirement(cookiecutter: dict[str, object]) -> str:
    """The project's requirement on runkit: the ``runkit_requirement`` answer, or for ``auto`` where this template came
    from, so the project installs the runkit of the very template commit it was made from.

    - through cruft (``_commit`` set): ``runkit @ git+<url>@<commit>#subdirectory=runkit``; ``cruft update`` moves it;
    - from a git URL with cookiecutter: the same, at ``--checkout`` or the clone's commit;
    - from a local checkout: ``runkit @ file:///<checkout>/runkit``;
    - ``index``: ``runkit>=0.1,<0.2`` from the package index the team publishes it to.
    """
    answer = str(cookiecutter.get("runkit_requirement", "auto"))
    if answer == "index":
        return INDEX_RANGE
    if answer != "auto":
        return answer
    template = str(cookiecutter.get("_template", "."))
    remote = "://" in template or template.startswith(("gh:", "gl:", "bb:", "git@"))
    checkout = Path(__file__).resolve().parent  # this file's folder: the template's copy cookiecutter renders from
    where = template if remote else checkout.as_uri()
    commit = cookiecutter.get("_commit") or cookiecutter.get("_checkout")
    if not commit and remote:
        commit = _head(checkout)
    if commit and (remote or cookiecutter.get("_commit")):
        return f"{LIBRARY} @ git+{_expanded(where)}@{commit}#subdirectory={LIBRARY}"
    return f"{LIBRARY} @ {where}/{LIBRARY}"


def _expanded(url: str) -> str:
    """A cookiecutter abbreviation (``gh:org/repo``) as the URL pip clones."""
    hosts = {"gh:": "https://github.com/", "gl:": "https://gitlab.com/", "bb:": "https://bitbucket.org/"}
    for short, host in hosts.items():
        if url.startswith(short):
            return host + url[len(short) :].removesuffix(".git") + ".git"
    return url


def _head(repo: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None
