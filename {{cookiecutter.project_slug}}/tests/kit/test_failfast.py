"""Fail fast, say where: a non-finite loss stops the run at its step; bad samples stop it before training."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from support import CONFIGS, PACKAGE, launch
from faults import fault

RUN = Path("runs/debug")
CONFIG_FLAGS = [f"--config={CONFIGS / f'{name}.yaml'}" for name in ("default", "debug/tiny")]


def test_nan_loss_stops_at_its_step_and_keeps_the_last_finite_checkpoint(cli: ModuleType, in_tmp: Path) -> None:
    # 4 steps per epoch: step 6 is batch 2 of epoch 1; last.ckpt was written at the end of epoch 0.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *CONFIG_FLAGS, "--trainer.enable_progress_bar=false", fault("NaNInputAtStep", step=6)])
    message = str(exit_info.value.code)  # a message, not a number: the process exits 1
    assert message.startswith("error: training loss is nan at global step 6 (epoch 1, batch 2)")
    assert "--trainer.precision 32-true" in message
    for name in ("last.ckpt", "best.ckpt"):
        checkpoint = torch.load(RUN / "checkpoints" / name, weights_only=True)
        assert checkpoint["global_step"] == 4
        assert all(torch.isfinite(value).all() for value in checkpoint["state_dict"].values())
    assert sorted(path.name for path in (RUN / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


def _nan_pixel(images: torch.Tensor, labels: torch.Tensor) -> None:
    images[17, 0, 3, 3] = float("nan")


def _inf_pixel(images: torch.Tensor, labels: torch.Tensor) -> None:
    images[5, 0, 0, 0] = float("inf")


def _label_too_large(images: torch.Tensor, labels: torch.Tensor) -> None:
    labels[9] = 10


def _label_negative(images: torch.Tensor, labels: torch.Tensor) -> None:
    labels[2] = -1


@pytest.mark.parametrize(
    ("split", "corrupt", "message"),
    [
        ("train", _nan_pixel, "train sample 17: contains NaN or Inf values"),
        ("val", _inf_pixel, "val sample 5: contains NaN or Inf values"),
        ("test", _label_too_large, "test sample 9: label 10 is outside [0, 10)"),
        ("train", _label_negative, "train sample 2: label -1 is outside [0, 10)"),
    ],
    ids=["nan", "inf", "label-10", "label-negative"],
)
def test_bad_sample_is_named_before_training(
    data: ModuleType, in_tmp: Path, split: str, corrupt: Callable[..., None], message: str
) -> None:
    module = gratings.GratingsDataModule(train_size=64, val_size=32, test_size=32, batch_size=16, data_dir="cache")
    module.prepare_data()
    (path,) = Path("cache").glob(f"gratings-{split}-*.pt")
    cached = torch.load(path, weights_only=True)
    corrupt(cached["images"], cached["labels"])
    torch.save(cached, path)
    with pytest.raises(ValueError, match=re.escape(message)):
        module.setup("fit")


def test_wrong_sample_shape_is_named(data: ModuleType, in_tmp: Path) -> None:
    module = gratings.GratingsDataModule(train_size=64, val_size=32, test_size=32, batch_size=16, data_dir="cache")
    module.prepare_data()
    (path,) = Path("cache").glob("gratings-val-*.pt")
    cached = torch.load(path, weights_only=True)
    torch.save({"images": cached["images"][:, :, :27, :27], "labels": cached["labels"]}, path)
    with pytest.raises(ValueError, match=r"val sample 0: shape \(1, 27, 27\), expected \(1, 28, 28\)"):
        module.setup("fit")


def test_large_finite_values_are_not_mistaken_for_inf() -> None:
    data_checks = importlib.import_module(f"{PACKAGE}.data_checks")
    images = torch.full((3, 1, 2, 2), 3e38)  # finite, but each sample's sum overflows float32
    data_checks.check_samples("train", images, torch.zeros(3, dtype=torch.int64), 10, (1, 2, 2))
    images[1, 0, 1, 1] = float("-inf")
    with pytest.raises(ValueError, match="train sample 1: contains NaN or Inf values"):
        data_checks.check_samples("train", images, torch.zeros(3, dtype=torch.int64), 10, (1, 2, 2))


@pytest.mark.slow
def test_bad_data_exits_1_with_one_error_line(data: ModuleType, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    gratings.GratingsDataModule(train_size=256, val_size=64, test_size=64, data_dir=str(cache)).prepare_data()
    (path,) = cache.glob("gratings-train-*.pt")
    cached = torch.load(path, weights_only=True)
    _nan_pixel(cached["images"], cached["labels"])
    torch.save(cached, path)
    done = launch(PACKAGE, "fit", *CONFIG_FLAGS, f"--data.init_args.data_dir={cache}", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.rstrip().splitlines()[-1] == "error: train sample 17: contains NaN or Inf values"
    assert not (tmp_path / "runs" / "debug" / "checkpoints").exists()
