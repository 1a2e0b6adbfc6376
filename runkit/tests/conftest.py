"""Fixtures of the kit's tests: every command runs the fixture task (``fixture.yaml``), never a project's task; and
runkit's pytest plugin (``runkit.testing.fixtures``: ``--faults``, the ``gpu`` skip, ``in_tmp``, ...)."""

from __future__ import annotations

import importlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support import PACKAGE, TESTS, submodule

from runkit.testing.support import launch

pytest_plugins = ["runkit.testing.fixtures"]
FIXTURE_CONFIG = TESTS / "fixture.yaml"


@pytest.fixture(scope="module", autouse=True)
def _fixture_task() -> Iterator[None]:
    """Commands start from the fixture task's config, in this process and in the processes it launches.

    Module-scoped, so that module-scoped fixtures (a shared trained run) see it too.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(FIXTURE_CONFIG))
        yield


@pytest.fixture(scope="session")
def cli() -> ModuleType:
    return importlib.import_module("fixture_cli")


@pytest.fixture
def run_cli(cli: ModuleType, in_tmp: Path) -> Callable[..., object]:
    """Runs a subcommand of the CLI in this process on the fixture task (plus ``args``) and returns it."""
    return lambda subcommand, *args: cli.build_cli([subcommand, *args])


@pytest.fixture
def run_process(in_tmp: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs ``python -m <package>`` on the fixture task in a fresh process and returns the finished process."""
    return lambda *args, timeout=300: launch(PACKAGE, *args, cwd=in_tmp, timeout=timeout)
