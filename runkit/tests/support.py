"""What the kit's tests share: where the library and this repository are, the program they run (``python -m
fixture_cli``: runkit's command line as a project declares it, on the fixture task). The helpers every project's
tests use too are imported from ``runkit.testing.support`` itself."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from runkit.testing.support import TEST_PATHS

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the library's folder: pyproject.toml, src/runkit/, docs/
REPO = ROOT.parent  # the template repository that develops it
TEMPLATE = REPO / "{{cookiecutter.project_slug}}"
"""The template's project: the presets (``configs/``) and scripts (``scripts/``) that name the kit's classes and run
its command line, which the kit's tests run on their fixture task (they hold no Jinja but in comments)."""
CONFIGS = TEMPLATE / "configs"
PACKAGE = "fixture_cli"  # `python -m fixture_cli`: runkit's command line with the fixture task's links
TEST_PATHS.append(str(TESTS))  # the fixture task and the foreign code, in every process a test starts


def submodule(name: str) -> ModuleType:
    """``runkit.<name>``, e.g. ``submodule("command.cli")``."""
    return importlib.import_module(f"runkit.{name}")


def config_flags(*presets: str) -> list[str]:
    """``--config`` flags for the template's presets, named by their path under ``configs/`` (``debug/tiny``)."""
    return [f"--config={CONFIGS / f'{name}.yaml'}" for name in presets]
