"""The example's ``predict`` on image tensor files: one row per input, the class and its probability."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from example import SMALL_RUN
from runkit.testing.support import run_dir_flags

SHAPE = (1, 28, 28)  # (C, H, W) of default.yaml's data
RUN = Path("runs/debug/predicted")


def images(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_predict_writes_one_row_per_input_file(
    run_cli: Callable[..., object], classifier: ModuleType, tmp_path: Path
) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    torch.save(images(3, *SHAPE), inputs / "a.pt")  # a batch
    torch.save(images(*SHAPE, seed=1), inputs / "b.pt")  # one image
    run_cli("fit", *run_dir_flags(RUN))
    presets = (*SMALL_RUN, "predict/writer")
    run_cli(
        "predict", *run_dir_flags(RUN), "--ckpt_path=best", f"--data.init_args.predict_path={inputs}", presets=presets
    )
    (folder,) = (RUN / "predictions").iterdir()  # predictions/<time>/: a new folder for each predict
    saved = torch.load(folder / "predictions.pt", weights_only=True)
    model = classifier.Classifier.load_from_checkpoint(RUN / "checkpoints/best.ckpt", weights_only=True).eval()
    with torch.no_grad():
        expected = model(torch.cat([images(3, *SHAPE), images(1, *SHAPE, seed=1)])).softmax(dim=-1)
    torch.testing.assert_close(saved["outputs"], expected)
    with open(folder / "predictions.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [row["source"] for row in rows] == ["a.pt[0]", "a.pt[1]", "a.pt[2]", "b.pt"]
    assert [int(row["argmax"]) for row in rows] == expected.argmax(dim=1).tolist()  # the class
    assert [float(row["max"]) for row in rows] == pytest.approx(expected.max(dim=1).values.tolist(), rel=1e-5)
