"""Fixtures of the example task's tests: its modules, and the command line run on the project's configs."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from example import SMALL_RUN
from PIL import Image
from runkit.testing.support import launch
from support import PACKAGE, config_flags, submodule


def write_image_folder(root: Path, classes: int = 3, per_class: int = 20, size: int = 16) -> Path:
    """Class ``k`` is a colour ramp of its own direction under noise; even files PNG, odd files JPEG."""
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 1, size)
    for label in range(classes):
        folder = root / f"class_{label}"
        folder.mkdir(parents=True)
        for index in range(per_class):
            angle = 2 * np.pi * label / classes
            base = np.cos(angle) * ramp[None, :] + np.sin(angle) * ramp[:, None]  # (H, W)
            pixels = 128 + 60 * base[..., None] + 20 * rng.standard_normal((size, size, 3))  # (H, W, 3)
            image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
            image.save(folder / f"{index:03d}.{'jpg' if index % 2 else 'png'}")
    (root / "class_0" / "notes.txt").write_text("not an image: ignored")
    return root


@pytest.fixture(scope="session")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small image folder: 3 classes x 20 images of 16 x 16 pixels, every other one a JPEG."""
    return write_image_folder(tmp_path_factory.mktemp("images") / "root")


@pytest.fixture(scope="session")
def write_images() -> Callable[..., Path]:
    """``write_image_folder``, for a test that needs a folder of its own."""
    return write_image_folder


@pytest.fixture(scope="session")
def networks() -> ModuleType:
    return submodule("task.networks")


@pytest.fixture(scope="session")
def gratings() -> ModuleType:
    return submodule("task.gratings")


@pytest.fixture(scope="session")
def classifier() -> ModuleType:
    return submodule("task.classifier")


@pytest.fixture(scope="session")
def cli() -> ModuleType:
    return submodule("cli")


@pytest.fixture
def run_cli(cli: ModuleType, in_tmp: Path) -> Callable[..., object]:
    """Runs the CLI in this process on ``configs/default.yaml`` (always loaded) plus presets, and returns it."""

    def run(*args: str, presets: tuple[str, ...] = SMALL_RUN) -> object:
        subcommand, *rest = args
        return cli.build_cli([subcommand, *config_flags(*presets), "--trainer.enable_progress_bar=false", *rest])

    return run


@pytest.fixture
def run_process(in_tmp: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs ``python -m <package>`` in a fresh process and returns the finished process."""
    return lambda *args, timeout=300: launch(PACKAGE, *args, cwd=in_tmp, timeout=timeout)
