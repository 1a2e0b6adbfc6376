"""Installs a generated project on a fresh venv in each way a team gets runkit, and runs the project's own tests.

    python scripts/test_installs.py                   # the three ways (~12 min on 2 cores, ~1.5 GB of venv each)
    python scripts/test_installs.py --only [git-tag]

The ways, each baked with the cookiecutter command from a folder of its own:

- ``index``: runkit published to a package index. runkit/README.md's publish command is run up to its upload in a
  copy of this working tree (``python -m build runkit``, then ``twine check`` on what it built); pip sees the
  folder it built into as a team's pip sees their index (``PIP_FIND_LINKS``); the project is baked with
  ``runkit_requirement=index``.
- ``git-tag``: this working tree committed into a temporary repository, tagged ``runkit-v<version>`` and cloned
  bare; the project is baked from the bare repository's ``file://`` URL with ``--checkout <tag>`` (the default
  ``auto`` answer pins the tag), and pip clones it at the tag.
- ``local``: the project is baked from this checkout with the default ``auto`` answer (a ``file://`` URL of its
  ``runkit/``).

Then, as the generated README's Quickstart says, in the project: a fresh venv, torch's CPU wheel first
(``pip install torch==TORCH``: an unpinned torch is PyPI's CUDA build, GBs), ``pip install -e ".[dev]"``, a check
that runkit is this repository's version from where the way says (its ``direct_url.json``, or for ``index`` the
wheel's very files), then ``make test``. pip's cache is the machine's: the venvs are fresh, the downloads may not be.
One line per way goes to stdout and to ``installs-results.txt`` (a way not run keeps its earlier line); each way's
whole log goes to ``build/installs/<way>.log``. Exit status 1 when a way fails.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any, Literal

from jsonargparse import CLI
from test_stacks import QUICKSTART, minutes, run_each, shell

ROOT = Path(__file__).resolve().parents[1]
Way = Literal["index", "git-tag", "local"]
WAYS = ("index", "git-tag", "local")
PUBLISH = "rm -rf runkit/dist && python -m build runkit && python -m twine upload runkit/dist/*"
"""runkit/README.md's publish command: this script runs its build and checks what twine would upload."""
TORCH = "2.13.0"
COUNTS = ("passed", "failed", "skipped")
GIT = "git -c user.name=installs -c user.email=installs@example.com -c init.defaultBranch=main"
RUNKIT = """import importlib.metadata as m, json, sys
d = m.distribution("runkit")
print(json.dumps({"version": d.version, "torch": m.version("torch"), "direct_url": json.loads(d.read_text("direct_url.json") or "null"), "record": d.read_text("RECORD")}))"""  # noqa: E501


def version() -> str:
    return tomllib.loads((ROOT / "runkit" / "pyproject.toml").read_text())["project"]["version"]


def repository(workdir: Path, tag: str, log: Path) -> Path:
    """This working tree (its files git does not ignore) committed into ``workdir/work`` and tagged ``tag``; its bare
    clone."""
    work = workdir / "work"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():  # not a file deleted and not yet committed
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, work / name)
    commands = f"{GIT} init --quiet && {GIT} add --all && {GIT} commit --quiet -m template && {GIT} tag {tag}"
    for command, cwd in ((commands, work), (f"git clone --quiet --bare {work} template.git", workdir)):
        status, output, _ = shell(command, cwd, log, timeout=300)
        if status != 0:
            raise SystemExit(f"error: {command} failed: {output.strip()}")
    return workdir / "template.git"


def publish(python: str, workdir: Path, log: Path) -> tuple[Path, float]:
    """Builds runkit as runkit/README.md says, in ``workdir/work``, in a venv of its own; the folder of its files,
    and the seconds it took."""
    readme = (ROOT / "runkit" / "README.md").read_text()
    if PUBLISH not in readme:
        raise SystemExit(f"error: runkit/README.md no longer says {PUBLISH!r}: update {Path(__file__).name}")
    tools = f"{python} -m venv {workdir / 'tools'} && . {workdir / 'tools/bin/activate'} && pip install build twine"
    build = PUBLISH.rsplit(" && ", 1)[0]  # up to the upload: twine check reads what it would upload
    status, _, seconds = shell(f"{tools} && {build} && twine check runkit/dist/*", workdir / "work", log, 1800)
    if status != 0:
        raise SystemExit(f"error: building runkit failed (exit {status}), see {log}")
    return workdir / "work" / "runkit" / "dist", seconds


def bake(workdir: Path, name: str, template: str, *options: str, log: Path) -> Path | None:
    """The cookiecutter command's project from ``template``, in ``workdir/name``, with its own clones' folder; None
    where cookiecutter fails (its output is in ``log``)."""
    config = workdir / "cookiecutter.yaml"
    config.write_text(json.dumps({"cookiecutters_dir": str(workdir / "clones"), "replay_dir": str(workdir / "re")}))
    command = [sys.executable, "-m", "cookiecutter", "--no-input", "--config-file", str(config)]
    command += ["--output-dir", str(workdir / name), template, *options]
    status, _, _ = shell(shlex.join(command), workdir, log, timeout=600)
    return next((workdir / name).iterdir()) if status == 0 else None


def wheel_record(dist: Path) -> set[str]:
    """The package files of the wheel in ``dist`` with their hashes, as its RECORD lists them."""
    (wheel,) = dist.glob("runkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        return hashed(archive.read(record).decode())


def hashed(record: str) -> set[str]:
    """The lines of a RECORD for runkit's own files (not the ``.pyc`` files an install adds, which have no hash)."""
    return {line for line in record.splitlines() if line.startswith("runkit/") and ",sha256=" in line}


def provenance(way: str, installed: dict[str, Any], expected: object) -> str | None:
    """Why the installed runkit is not the one ``way`` installs; None where it is."""
    if installed["version"] != version():
        return f"runkit {installed['version']}, not {version()}"
    direct = installed["direct_url"] or {}
    if way == "index":
        return None if not direct and hashed(installed["record"]) == expected else "runkit is not the wheel built"
    if way == "git-tag":
        vcs = direct.get("vcs_info", {})
        got = (direct.get("url"), vcs.get("requested_revision"), direct.get("subdirectory"))
        return None if got == expected else f"runkit from {got}, not {expected}"
    return None if direct.get("url") == expected else f"runkit from {direct.get('url')}, not {expected}"


def run_way(way: str, python: str, workdir: Path, log: Path) -> tuple[bool, str, list[str]]:
    """Bakes, installs and tests one way in ``workdir``; whether it passed, its result line, pytest's notes."""
    tag = f"runkit-v{version()}"
    pip_env, built = "", ""
    expected: object
    if way == "index":
        repository(workdir, tag, log)
        dist, seconds = publish(python, workdir, log)
        built = f"; runkit built first: {minutes(seconds)}"
        project = bake(workdir, way, str(ROOT), "runkit_requirement=index", log=log)
        wanted, expected = "runkit>=0.2,<0.3", wheel_record(dist)
        # The team's index, as their pip configuration names it: here the folder built into, beside the machine's.
        pip_env = f"export PIP_FIND_LINKS='{os.environ.get('PIP_FIND_LINKS', '')} {dist}' && "
    elif way == "git-tag":
        bare = repository(workdir, tag, log)
        project = bake(workdir, way, bare.as_uri(), "--checkout", tag, log=log)
        link = bare.as_uri().replace("file:///", "file://localhost/")  # local_extensions.py says why
        wanted, expected = f"runkit @ git+{link}@{tag}#subdirectory=runkit", (link, tag, "runkit")
    else:
        project = bake(workdir, way, str(ROOT), log=log)
        wanted, expected = f"runkit @ {ROOT.as_uri()}/runkit", f"{ROOT.as_uri()}/runkit"
    if project is None:
        return False, f"{way}: generation failed, see {log}", []
    dependencies = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
    written = next(line for line in dependencies if line.startswith("runkit"))
    if written != wanted:
        return False, f"{way}: the project requires {written!r}, not {wanted!r}", []
    readme = (project / "README.md").read_text()
    if missing := [line for line in QUICKSTART if line not in readme]:
        raise SystemExit(f"error: the generated README no longer says {missing}: update {Path(__file__).name}")
    venv, install = f"{python} -m venv .venv && . .venv/bin/activate && ", QUICKSTART[1]
    status, _, torch_seconds = shell(f"{venv}pip install torch=={TORCH}", project, log, timeout=3600)
    if status == 0:
        status, _, install_seconds = shell(f". .venv/bin/activate && {pip_env}{install}", project, log, timeout=3600)
    if status != 0:
        return False, f"{way}: install failed (exit {status}), see {log}", []
    shown = subprocess.run([project / ".venv/bin/python", "-c", RUNKIT], capture_output=True, text=True, check=True)
    installed = json.loads(shown.stdout)
    if problem := provenance(way, installed, expected):
        return False, f"{way}: {problem}", []
    status, output, test_seconds = shell(". .venv/bin/activate && make test", project, log, timeout=3600)
    lines = output.splitlines()
    summary = next((line for line in reversed(lines) if re.match(r"^=+ .* in [\d.]+s", line)), "")
    counts = dict.fromkeys(COUNTS, 0) | {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    counts["failed"] += counts.get("errors", 0) + counts.get("error", 0)
    passed = status == 0 and counts["failed"] == 0 and counts["passed"] > 0
    line = (
        f"{way}: {written} -> runkit {installed['version']}, torch {installed['torch']}"
        f" | install {minutes(install_seconds)} (torch first: {minutes(torch_seconds)}{built})"
        f" | make test {', '.join(f'{counts[word]} {word}' for word in COUNTS)} in {minutes(test_seconds)}"
        f" | {'ok' if passed else f'FAILED (exit {status})'}"
    )
    return passed, line, [line for line in lines if line.startswith(("FAILED", "ERROR"))]  # skips: in the log


def main(only: list[Way] | None = None, python: str = "python3", keep: bool = False, min_free_gb: float = 8) -> int:
    """Runs the ways; prints and writes one line each.

    Args:
        only: Run just these ways (``index``, ``git-tag``, ``local``).
        python: The interpreter the venvs are made from, as a user's ``python``.
        keep: Keep each way's folder (repository, project and venv, GBs) instead of deleting it.
        min_free_gb: Refuse to start a way with less free disk than this where the venvs go (GB).
    """
    logs = ROOT / "build" / "installs"
    logs.mkdir(parents=True, exist_ok=True)
    results = ROOT / "installs-results.txt"
    header = (
        f"# Python {platform.python_version()} on {os.cpu_count()} cores; each way: a fresh venv, pip install"
        f" torch=={TORCH}, pip install -e '.[dev]' as the generated README says, then make test"
    )
    return run_each(only or list(WAYS), list(WAYS), run_way, python, results, header, logs, keep, min_free_gb)


if __name__ == "__main__":
    sys.exit(CLI(main, as_positional=False))
