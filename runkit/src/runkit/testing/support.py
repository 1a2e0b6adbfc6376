"""What a runkit project's tests and the kit's own share: run the command line in a process, compare checkpoints,
expect a refusal, and skip where an extra is missing. Needs pytest (a test dependency, not runkit's).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

TEST_PATHS: list[str] = []
"""Folders every process a test starts imports from: a suite's own modules named on its command lines (the kit's
fixture task, a README's examples). A suite's ``conftest.py`` adds its folder."""
PRESET_EXTRAS = {"logger/mlflow": "mlflow", "logger/wandb": "wandb"}
"""Presets whose tracker needs an extra of the project (``pip install -e '.[mlflow]'``): their tests skip without it."""


def needs_extras(*presets: str) -> None:
    """Skips, saying which extra, when a preset's tracker is not installed."""
    for preset in presets:
        if preset in PRESET_EXTRAS:
            extra = PRESET_EXTRAS[preset]
            pytest.importorskip(extra, reason=f"configs/{preset}.yaml needs the project's `{extra}` extra")


def launch(
    package: str,
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    wrapper: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m <package> *args`` in ``cwd``; stdout and stderr together are the result's ``stdout``.
    ``wrapper``: a command that runs it, as people start jobs (``("nohup",)``).

    ``TEST_PATHS`` are on ``PYTHONPATH``, so a suite's own modules named on the command line import in every process
    (DDP ones too). Output goes to
    ``cwd/out.log``, not a pipe: DataLoader workers of a killed process hold a pipe open until they notice their
    parent is gone, which would keep the caller waiting.
    """
    environment = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore", **(env or {})}
    log = cwd / "out.log"
    with open(log, "w") as out:
        process = subprocess.run(
            [*wrapper, sys.executable, "-m", package, *args],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
            timeout=timeout,
        )
    return subprocess.CompletedProcess(process.args, process.returncode, log.read_text(), "")


def child_path() -> str:
    """``PYTHONPATH`` for a process a test starts: ``TEST_PATHS``, then what this process was given (a package put
    first on the path stays first)."""
    return os.pathsep.join(filter(None, [*TEST_PATHS, os.environ.get("PYTHONPATH")]))


def run_dir_flags(run_dir: Path | str) -> list[str]:
    """Flags that make a run write exactly into ``run_dir``, read as ``<default_root_dir>/<experiment>/<name>``."""
    run_dir = Path(run_dir)
    return [
        f"--trainer.default_root_dir={run_dir.parent.parent}",
        f"--run.experiment={run_dir.parent.name}",
        f"--run.name={run_dir.name}",
    ]


def fit_exit_code(cli: ModuleType, run: Path, *args: str) -> int:
    """Runs ``fit`` into ``run`` in this process and returns its exit code (0: finished)."""
    try:
        cli.build_cli(["fit", *run_dir_flags(run), *args])
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def last_checkpoint(run: Path) -> dict[str, Any]:
    """The run's ``last.ckpt``, loaded as a resume loads it (``weights_only``)."""
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


def refused(capsys: pytest.CaptureFixture[str], command: Callable[[], object]) -> str:
    """Runs a command that must refuse its input: exit 2, and one ``error:`` line last on stderr, which is returned."""
    with pytest.raises(SystemExit) as exit_info:
        command()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert err.strip().splitlines()[-1] == errors[0], err  # nothing after it: one line, no traceback
    return errors[0]


def assert_identical(actual: object, expected: object, where: str = "checkpoint") -> None:
    """Equal structure and bit-identical tensors (what exact resume promises of two checkpoints)."""
    assert type(actual) is type(expected), where
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected), where  # type: ignore[arg-type]
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where  # type: ignore[attr-defined]
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}[{key!r}]")  # type: ignore[index]
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where  # type: ignore[arg-type]
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):  # type: ignore[call-overload]
            assert_identical(a, e, f"{where}[{index}]")
    else:
        assert actual == expected, where


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) and the SHA-256 of its bytes: equal digests, untouched files."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        for path in sorted(folder.rglob("*"))
    }


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Makes ``folder`` and everything in it unwritable for the block, for root too (``chattr +i``: skipped where
    that is not available); the permissions come back afterwards."""
    paths = [folder, *folder.rglob("*")]
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(modes[path] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    immutable = os.geteuid() == 0 if hasattr(os, "geteuid") else False  # root writes through permissions
    try:
        if immutable and not (shutil.which("chattr") and _chattr("+i", folder)):
            pytest.skip("root ignores permissions, and chattr +i is not available here")
        yield
    finally:
        if immutable:
            _chattr("-i", folder)
        for path, mode in modes.items():
            path.chmod(mode)


def _chattr(flag: str, folder: Path) -> bool:
    return subprocess.run(["chattr", "-R", flag, str(folder)], check=False).returncode == 0
