"""``predict`` on your own tensor files, writing predictions to disk; bad input files are named."""

from __future__ import annotations

import csv
import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch
from support import PACKAGE

prediction = importlib.import_module(f"{PACKAGE}.prediction")
SHAPE = (1, 28, 28)  # (C, H, W) of default.yaml's data


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


def test_predict_writes_one_row_per_input(run_cli: object, module: ModuleType, inputs: Path) -> None:
    run_cli("fit")
    presets = ("debug", "predict")
    run_cli("predict", "--ckpt_path=best", f"--data.init_args.predict_path={inputs}", presets=presets)
    out = Path("runs/debug/predictions")
    saved = torch.load(out / "predictions.pt", weights_only=True)
    model = classifier.Classifier.load_from_checkpoint("runs/debug/checkpoints/best.ckpt", weights_only=True).eval()
    with torch.no_grad():
        expected = model(torch.cat([images(3, *SHAPE), images(1, *SHAPE, seed=1)])).softmax(dim=-1)
    torch.testing.assert_close(saved["probabilities"], expected)
    with open(out / "predictions.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [row["source"] for row in rows] == ["a.pt[0]", "a.pt[1]", "a.pt[2]", "b.pt"]
    assert [int(row["class"]) for row in rows] == expected.argmax(dim=1).tolist()
    assert [float(row["probability"]) for row in rows] == pytest.approx(expected.max(dim=1).values.tolist(), abs=1e-6)
