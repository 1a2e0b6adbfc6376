"""Runs a baked default project's suite on the lowest and the newest stack its ``pyproject.toml`` allows.

    python scripts/test_stacks.py                  # both stacks (~25 min on 2 cores, a few GB of venv each)
    python scripts/test_stacks.py --only [lowest]

Each stack is set up as the generated README's Quickstart says, and nothing more: the default answers baked into a
fresh folder, a fresh venv, ``pip install -e ".[dev]"`` (no other extra: tests that need one skip, saying which),
then the project's ``make test``. ``lowest`` adds a constraints file that pins the floors the generated
``pyproject.toml`` declares for ``PINNED`` with ``==``; ``newest`` is the README's command as it is, whatever the
package index resolves today. One line per stack (versions, test counts, times) goes to stdout and to
``stacks-results.txt``, where a stack not run keeps its earlier line; each stack's whole log goes to
``build/stacks/<stack>.log``. Exit status 1 when a stack fails.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cookiecutter.main import cookiecutter
from jsonargparse import CLI
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
Stack = Literal["lowest", "newest"]
STACKS = ("lowest", "newest")
PINNED = ("torch", "lightning", "torchmetrics", "jsonargparse")
"""The dependencies whose declared floor the lowest stack pins; the rest resolve as pip chooses."""
QUICKSTART = ("python -m venv .venv && . .venv/bin/activate", 'pip install -e ".[dev]"')
"""The generated README's install lines this script follows: it stops if the README no longer says them."""
VERSIONS = "import sys, importlib.metadata as m; print(' '.join(f'{n} {m.version(n)}' for n in sys.argv[1:]))"
COUNTS = ("passed", "failed", "skipped", "errors", "error")


def floors(pyproject: Path) -> list[str]:
    """``name==floor`` for each of ``PINNED``, from the ``>=`` bounds of the project's dependencies."""
    requirements = {
        (requirement := Requirement(line)).name: requirement
        for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    }
    pins = []
    for name in PINNED:
        lower = [spec.version for spec in requirements[name].specifier if spec.operator == ">="]
        if not lower:
            raise SystemExit(f"error: {pyproject} declares no floor (>=) for {name}")
        pins.append(f"{name}=={lower[0]}")
    return pins


def shell(command: str, cwd: Path, log: Path, timeout: float) -> tuple[int, str, float]:
    """Runs ``command`` with bash in ``cwd``, outside any venv; logs its output; its status, output and seconds."""
    environment = {key: value for key, value in os.environ.items() if key not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    start = time.perf_counter()
    try:
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        status, output = result.returncode, result.stdout
    except subprocess.TimeoutExpired as expired:
        status, output = 124, f"{expired.stdout or ''}\ntimed out after {timeout:.0f} s"
    with log.open("a") as out:
        out.write(f"$ {command}\n{output}\n[exit {status}]\n")
    return status, output, time.perf_counter() - start


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def run_stack(name: str, python: str, workdir: Path, log: Path) -> tuple[bool, str, list[str]]:
    """Bakes, installs and tests one stack in ``workdir``; whether it passed, its result line, pytest's summary."""
    project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(workdir)))
    readme = (project / "README.md").read_text()
    if missing := [line for line in QUICKSTART if line not in readme]:
        raise SystemExit(f"error: the generated README no longer says {missing}: update {Path(__file__).name}")
    install = QUICKSTART[1]
    if name == "lowest":
        (workdir / "floors.txt").write_text("\n".join(floors(project / "pyproject.toml")) + "\n")
        install += f" --constraint {workdir / 'floors.txt'}"
    venv = f"{python} -m venv .venv && . .venv/bin/activate && "
    status, _, install_seconds = shell(venv + install, project, log, timeout=3600)
    if status != 0:
        return False, f"{name}: install failed (exit {status}, {minutes(install_seconds)}), see {log}", []
    versions = subprocess.run(
        [project / ".venv" / "bin" / "python", "-c", VERSIONS, *PINNED], capture_output=True, text=True, check=True
    ).stdout.strip()
    status, output, test_seconds = shell(". .venv/bin/activate && make test", project, log, timeout=3600)
    tail = output.splitlines()
    summary = next((line for line in reversed(tail) if re.match(r"^=+ .* in [\d.]+s", line)), "")
    counts = dict.fromkeys(COUNTS[:3], 0) | {
        word: int(number) for number, word in re.findall(r"(\d+) (" + "|".join(COUNTS) + ")", summary)
    }
    counts["failed"] += counts.pop("errors", 0) + counts.pop("error", 0)
    shown = ", ".join(f"{counts[word]} {word}" for word in COUNTS[:3])
    passed = status == 0 and counts["failed"] == 0 and counts["passed"] > 0
    line = (
        f"{name}: {versions} | {shown} | install {minutes(install_seconds)}, tests {minutes(test_seconds)}"
        f" | {'ok' if passed else f'FAILED (exit {status})'}"
    )
    notes = [line for line in tail if line.startswith(("SKIPPED", "FAILED", "ERROR"))]
    return passed, line, notes


def main(only: list[Stack] | None = None, python: str = "python3", keep: bool = False, min_free_gb: float = 15) -> int:
    """Runs the stacks; prints and writes one line each.

    Args:
        only: Run just these stacks (``lowest``, ``newest``).
        python: The interpreter the venvs are made from, as a user's ``python``.
        keep: Keep each stack's folder (project and venv, several GB) instead of deleting it.
        min_free_gb: Refuse to start a stack with less free disk than this where the venvs go (GB).
    """
    names = only or list(STACKS)
    logs = ROOT / "build" / "stacks"
    logs.mkdir(parents=True, exist_ok=True)
    results = ROOT / "stacks-results.txt"
    header = (
        f"# Python {platform.python_version()} on {os.cpu_count()} cores; each stack: pip install -e '.[dev]' as the"
        " generated README says, then make test"
    )
    return run_each(names, list(STACKS), run_stack, python, results, header, logs, keep, min_free_gb)


def run_each(
    names: list[str],
    order: list[str],
    run_one: Callable[[str, str, Path, Path], tuple[bool, str, list[str]]],
    python: str,
    results: Path,
    header: str,
    logs: Path,
    keep: bool,
    min_free_gb: float,
) -> int:
    """Runs ``run_one`` for each of ``names`` in a fresh folder, printing its line and writing ``results`` (in
    ``order``; one not run this time keeps its line from an earlier run); 1 if any failed. test_installs.py too."""
    print(header, flush=True)
    kept = results.read_text().splitlines()[1:] if results.is_file() else []
    lines = {line.split(":")[0]: line for line in kept if line.split(":")[0] in order}
    failed = False
    for name in names:
        workdir = Path(tempfile.mkdtemp(prefix=f"{results.stem.removesuffix('-results')}-{name}-"))
        free = shutil.disk_usage(workdir).free / 1e9
        if free < min_free_gb:
            shutil.rmtree(workdir)
            raise SystemExit(f"error: {free:.1f} GB free under {workdir.parent}: {name} needs {min_free_gb:g} GB")
        log = logs / f"{name}.log"
        log.write_text("")
        try:
            passed, line, notes = run_one(name, python, workdir, log)
        finally:
            if not keep:
                shutil.rmtree(workdir, ignore_errors=True)
        failed |= not passed
        print(line, *notes, sep="\n  ", flush=True)
        lines[name] = f"{line} | {datetime.date.today()}"
        results.write_text("\n".join([header, *(lines[each] for each in order if each in lines)]) + "\n")
    print(f"logs: {logs}/<name>.log; results: {results}", flush=True)
    return int(failed)


if __name__ == "__main__":
    sys.exit(CLI(main, as_positional=False))
