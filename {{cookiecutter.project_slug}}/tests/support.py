"""What this project's tests share: where the project is, its package, and its smallest run. runkit's test helpers
(run the command line in a process, compare checkpoints, expect a refusal) are imported from
``runkit.testing.support`` itself.

Nothing here names the task: the package is found under ``src/``, and ``SMALL_RUN`` cuts any task's run to a few
batches, so these files need no edit when the example is replaced.
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
SMALL_RUN = ("debug/tiny",)  # any task in seconds: 2 epochs of 4 training and 2 validation batches
TEST_PATHS.append(str(TESTS))


def submodule(name: str) -> ModuleType:
    """``<package>.<name>``, e.g. ``submodule("cli")``."""
    return importlib.import_module(f"{PACKAGE}.{name}")


def config_flags(*presets: str) -> list[str]:
    """``--config`` flags for presets named by their path under ``configs/`` without ``.yaml`` (``debug/tiny``)."""
    return [f"--config={CONFIGS / f'{name}.yaml'}" for name in presets]
