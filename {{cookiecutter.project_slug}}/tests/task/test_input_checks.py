"""The example's input checks: a bad gratings sample stops the run before training, named by split and index."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch


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
    gratings: ModuleType, in_tmp: Path, split: str, corrupt: Callable[..., None], message: str
) -> None:
    module = gratings.GratingsDataModule(train_size=64, val_size=32, test_size=32, batch_size=16, data_dir="cache")
    module.prepare_data()
    (path,) = Path("cache").glob(f"gratings-{split}-*.pt")
    cached = torch.load(path, weights_only=True)
    corrupt(cached["images"], cached["labels"])
    torch.save(cached, path)
    with pytest.raises(ValueError, match=re.escape(message)):
        module.setup("fit")


def test_wrong_sample_shape_is_named(gratings: ModuleType, in_tmp: Path) -> None:
    module = gratings.GratingsDataModule(train_size=64, val_size=32, test_size=32, batch_size=16, data_dir="cache")
    module.prepare_data()
    (path,) = Path("cache").glob("gratings-val-*.pt")
    cached = torch.load(path, weights_only=True)
    torch.save({"images": cached["images"][:, :, :27, :27], "labels": cached["labels"]}, path)
    with pytest.raises(ValueError, match=r"val sample 0: shape \(1, 27, 27\), expected \(1, 28, 28\)"):
        module.setup("fit")
