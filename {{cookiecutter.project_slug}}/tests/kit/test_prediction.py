"""Prediction: tensor files as inputs (bad ones named), and the writer of predictions to disk."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import fixture_task
import pytest
import torch
from support import PACKAGE, run_dir_flags, submodule

prediction = submodule("kit.tools.prediction")
SHAPE = (1, 28, 28)  # (C, H, W) images


def images(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "inputs"
    folder.mkdir()
    torch.save(images(3, *SHAPE), folder / "a.pt")  # a batch
    torch.save(images(*SHAPE, seed=1), folder / "b.pt")  # one image
    (folder / "notes.txt").write_text("not an input")
    return folder


def test_tensor_files_from_a_folder_and_from_one_file(inputs: Path) -> None:
    dataset = prediction.TensorFiles(inputs, SHAPE)
    assert dataset.sources == ["a.pt[0]", "a.pt[1]", "a.pt[2]", "b.pt"]
    torch.testing.assert_close(dataset[1], images(3, *SHAPE)[1])
    torch.testing.assert_close(dataset[3], images(*SHAPE, seed=1))
    assert len(prediction.TensorFiles(inputs / "a.pt", SHAPE)) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (images(2, 3, 28, 28), r"bad\.pt has shape \(2, 3, 28, 28\): expected \(C, H, W\) = \(1, 28, 28\)"),
        (images(28, 28), r"bad\.pt has shape \(28, 28\)"),
        (torch.zeros(2, *SHAPE, dtype=torch.uint8), r"bad\.pt has dtype torch\.uint8"),
        (
            torch.stack([images(*SHAPE), images(*SHAPE).fill_(float("nan"))]),
            r"bad\.pt has non-finite values in image 1",
        ),
        ({"images": images(*SHAPE)}, r"bad\.pt holds a dict, not a tensor"),
    ],
    ids=["channels", "rank", "dtype", "nan", "not-a-tensor"],
)
def test_bad_input_file_is_named(tmp_path: Path, content: object, message: str) -> None:
    torch.save(content, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=message):
        prediction.TensorFiles(tmp_path, SHAPE)


def test_missing_or_empty_predict_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"holds no \.pt files"):
        prediction.TensorFiles(tmp_path, SHAPE)
    with pytest.raises(ValueError, match="does not exist"):
        prediction.TensorFiles(tmp_path / "nowhere", SHAPE)


def test_writer_saves_every_output_with_its_index(run_cli: Callable[..., object]) -> None:
    run = Path("runs/fixture/predicted")
    run_cli("fit", *run_dir_flags(run), "--trainer.max_epochs=1")
    writer = f"--trainer.callbacks+={PACKAGE}.kit.tools.prediction.PredictionWriter"
    run_cli("predict", *run_dir_flags(run), "--ckpt_path=best", writer)
    saved = torch.load(run / "predictions" / "predictions.pt", weights_only=True)
    model = fixture_task.SequenceRegressor.load_from_checkpoint(run / "checkpoints/best.ckpt", weights_only=True)
    datamodule = fixture_task.SequenceData()
    datamodule.setup("predict")
    with torch.no_grad():
        expected = model.eval()(datamodule.datasets["val"].inputs)  # (64, 1): the predict set, in order
    torch.testing.assert_close(saved["outputs"], expected)
    assert saved["indices"].tolist() == list(range(64))
    with open(run / "predictions" / "predictions.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["index", "source", "output_0"]  # one value per input: no argmax column
    assert [float(row["output_0"]) for row in rows] == pytest.approx(expected.flatten().tolist(), rel=1e-5)
