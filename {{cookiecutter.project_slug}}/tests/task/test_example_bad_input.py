"""Bad values for the example task: one ``error:`` line naming the key and the class, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from example import SMALL_RUN
from runkit.testing.support import refused
from support import CONFIGS

SMALL_DEBUG = [f"--config={CONFIGS / name}.yaml" for name in SMALL_RUN]


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        # Built on a stand-in parameter by the Classifier, instead of inside `fit` by configure_optimizers.
        ("--model.init_args.optimizer.init_args.lr=-0.1", ["model: Classifier (", "optimizer: Invalid learning rate"]),
        (
            "--model.init_args.scheduler.init_args.warmup_fraction=1.5",
            ["model: Classifier (", "scheduler: warmup_fraction must be in [0, 1], got 1.5"],
        ),
        ("--data.init_args.image_size=1", ["model: Classifier (", "image size 1x1 must be divisible by"]),
        # Built without complaint, then a 100-line traceback from the first forward.
        ("--model.init_args.network.init_args.widths=[0]", ["model: Classifier (", "widths must be channel counts"]),
        ("--data.init_args.num_classes=1", ["data: GratingsDataModule (", "num_classes must be >= 2, got 1"]),
        ("--data.init_args.num_workers=-1", ["data: GratingsDataModule (", "num_workers must be >= 0 or null"]),
        ("--data.init_args.train_size=16", ["data: GratingsDataModule (", "train_size=16 is smaller than batch_size"]),
        # Each of these was a traceback from deep inside torch, at setup or in a loader worker.
        ("--data.init_args.val_size=-1", ["data: GratingsDataModule (", "val_size must be >= 0, got -1"]),
        ("--data.init_args.test_size=-5", ["data: GratingsDataModule (", "test_size must be >= 0, got -5"]),
        ("--data.init_args.max_shift=-1", ["data: GratingsDataModule (", "max_shift must be >= 0, got -1"]),
        ("--data.init_args.prefetch_factor=0", ["data: GratingsDataModule (", "prefetch_factor must be >= 1, got 0"]),
        (
            "--data.init_args.image_size=100000",
            ["data: GratingsDataModule (", "image_size=100000: the 384 images would need", "GiB of memory"],
        ),
    ],
)
def test_a_refused_constructor_value_is_one_line(
    cli: ModuleType, capsys: pytest.CaptureFixture[str], in_tmp: Path, flag: str, expected: list[str]
) -> None:
    line = refused(capsys, lambda: cli.build_cli([*SMALL_DEBUG, flag], run=False))
    assert all(part in line for part in expected), line
    assert list(in_tmp.iterdir()) == []
