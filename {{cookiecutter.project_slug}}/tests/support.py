"""What this project's tests share: where the project is, its package and its small example run. runkit's test
helpers (run the command line in a process, compare checkpoints, expect a refusal) are imported from
``runkit.testing.support`` itself.

The package is found under ``src/``, so nothing here needs an edit when it is renamed.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from runkit.testing.support import TEST_PATHS

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
CONFIGS = ROOT / "configs"
(PACKAGE,) = [path.name for path in (ROOT / "src").iterdir() if (path / "__init__.py").is_file()]
SMALL_RUN = ("debug/tiny", "example/small_data")  # the example in seconds: a few batches of 256 generated images
TEST_PATHS.append(str(TESTS))


def submodule(name: str) -> ModuleType:
    """``<package>.<name>``, e.g. ``submodule("task.classifier")``."""
    return importlib.import_module(f"{PACKAGE}.{name}")


def runkit_module(name: str) -> ModuleType:
    """``runkit.<name>``, e.g. ``runkit_module("command.cli")``."""
    return importlib.import_module(f"runkit.{name}")


def config_flags(*presets: str) -> list[str]:
    """``--config`` flags for presets named by their path under ``configs/`` without ``.yaml`` (``debug/tiny``)."""
    return [f"--config={CONFIGS / f'{name}.yaml'}" for name in presets]
