"""Prediction: tensor files as inputs (bad ones named), and the writer of predictions to disk."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import fixture_task
import lightning.pytorch as pl
import pytest
import torch
from support import submodule

from runkit.testing.support import digest, read_only, refused, run_dir_flags

prediction = submodule("tools.prediction")
SHAPE = (1, 28, 28)  # (C, H, W) images
WRITER = "--trainer.callbacks+=runkit.tools.prediction.PredictionWriter"
OUT = "--trainer.callbacks.output_dir"


class Opaque:
    """An object a ``.pt`` file may pickle, which ``torch.load(weights_only=True)`` refuses to build."""


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
        (
            images(2, 3, 28, 28),
            r"bad\.pt has shape \(2, 3, 28, 28\): expected \(C, H, W\) = \(1, 28, 28\) for one image, or"
            r" \(N, 1, 28, 28\) for N images; these have 3 channels, the model takes 1$",
        ),
        # It said `or (N, C, H, W)`, letters where the numbers are known, and not what was wrong.
        (images(28, 28), r"bad\.pt has shape \(28, 28\): .*; the channel is missing: save images\.unsqueeze\(-3\)$"),
        (images(5, 28, 28), r"bad\.pt has shape \(5, 28, 28\): .*; the channel is missing"),
        (torch.zeros(2, *SHAPE, dtype=torch.uint8), r"bad\.pt has dtype torch\.uint8"),
        (
            torch.stack([images(*SHAPE), images(*SHAPE).fill_(float("nan"))]),
            r"bad\.pt has non-finite values in image 1",
        ),
        ({"images": images(*SHAPE)}, r"bad\.pt holds a dict, not a tensor"),
        # Passed every check, then a 170-line dispatcher traceback from the first convolution.
        (images(2, *SHAPE).to_sparse(), r"bad\.pt holds a sparse tensor \(torch\.sparse_coo\): expected dense images"),
        (
            Opaque(),  # torch.load(weights_only=True) raised its UnpicklingError, many lines long
            r"bad\.pt: torch\.load\(weights_only=True\) refuses it: Unsupported global: GLOBAL test_prediction\.Opaque;"
            r" save the tensor alone",
        ),
    ],
    ids=["channels", "rank", "batch-without-channel", "dtype", "nan", "not-a-tensor", "sparse", "pickled"],
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
    torch.save(images(0, *SHAPE), tmp_path / "none.pt")  # `predict` ran over it, wrote nothing and exited 0
    for path in (tmp_path, tmp_path / "none.pt"):
        with pytest.raises(ValueError, match=rf"predict_path '{re.escape(str(path))}' holds 0 images: nothing to"):
            prediction.TensorFiles(path, SHAPE)


@pytest.fixture(scope="module")
def trained(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the fixture task (one epoch); tests predict from its checkpoints."""
    run = tmp_path_factory.mktemp("predict") / "runs" / "fixture" / "predicted"
    cli.build_cli(["fit", *run_dir_flags(run), "--trainer.max_epochs=1"])
    return run


def test_writer_saves_every_output_with_its_index_in_a_new_folder_each_time(
    run_cli: Callable[..., object], trained: Path, capsys: pytest.CaptureFixture[str], lightning_log: list[str]
) -> None:
    run = trained
    run_cli("predict", *run_dir_flags(run), "--ckpt_path=best", WRITER)
    (folder,) = (run / "predictions").iterdir()  # predictions/<time>/
    saved = torch.load(folder / "predictions.pt", weights_only=True)
    model = fixture_task.SequenceRegressor.load_from_checkpoint(run / "checkpoints/best.ckpt", weights_only=True)
    datamodule = fixture_task.SequenceData()
    datamodule.setup("predict")
    with torch.no_grad():
        expected = model.eval()(datamodule.datasets["val"].inputs)  # (64, 1): the predict set, in order
    torch.testing.assert_close(saved["outputs"], expected)
    assert saved["indices"].tolist() == list(range(64))
    with open(folder / "predictions.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["index", "source", "output_0"]  # one value per input: no argmax column
    assert [float(row["output_0"]) for row in rows] == pytest.approx(expected.flatten().tolist(), rel=1e-5)
    # Predicting again never touches the earlier predictions: a folder of its own, named after its start.
    before = digest(folder)
    run_cli("predict", *run_dir_flags(run), "--ckpt_path=last", WRITER)
    assert len(list((run / "predictions").iterdir())) == 2
    assert digest(folder) == before
    said = [line for line in lightning_log if line.startswith("predictions: ")]
    assert said == [f"predictions: {path}" for path in sorted((run / "predictions").iterdir())]
    # A folder named by the user is used only while it is empty.
    before = digest(run)
    args = ["predict", *run_dir_flags(run), "--ckpt_path=best", WRITER, f"{OUT}={folder}"]
    line = refused(capsys, lambda: run_cli(*args))
    assert line.endswith(
        f"output_dir: {folder} already holds predictions.csv, predictions.pt: give an empty or new folder,"
        " or null (a new folder under the run's predictions/)"
    ), line
    assert digest(run) == before


def test_a_read_only_run_is_validated_tested_and_predicted_and_left_as_it_was(
    run_cli: Callable[..., object], trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(trained)
    checkpoint = f"--ckpt_path={trained / 'checkpoints' / 'best.ckpt'}"
    with read_only(trained):
        for command in ("validate", "test", "predict"):
            run_cli(command, checkpoint)  # they write nothing in the run
        line = refused(capsys, lambda: run_cli("predict", checkpoint, WRITER))  # the writer would
    # The folder it would write in, or its first existing parent (other tests of this run may have made it).
    folder = re.escape(str(trained))
    assert re.search(rf"output_dir: cannot write in {folder}(/predictions)? \(permission denied\)$", line), line
    assert digest(trained) == before


exported_model = submodule("tools.exported_model")


@pytest.fixture(scope="module")
def exported_run(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the fixture regressor, exported (float files) and quantized (``int8_dynamic``, recommended file)."""
    run = tmp_path_factory.mktemp("exported") / "runs" / "x" / "run"
    cli.build_cli(["fit", *run_dir_flags(run), "--trainer.max_epochs=2"])
    export = ["export", *run_dir_flags(run), "--ckpt_path=best", "--latency_repeats=2"]
    cli.build_cli([*export, f"--output_dir={run / 'float'}"])
    cli.build_cli([*export, f"--output_dir={run / 'int8'}", "--quantize=int8_dynamic"])
    return run


def predictions(model: torch.nn.Module) -> torch.Tensor:
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    return torch.cat(trainer.predict(model, fixture_task.SequenceData()))


@pytest.mark.parametrize("folder", ["float", "int8"])
def test_predict_runs_the_file_an_export_recommends_with_eager_outputs_within_the_bound(
    exported_run: Path, folder: str
) -> None:
    best = exported_run / "checkpoints/best.ckpt"
    eager = predictions(fixture_task.SequenceRegressor.load_from_checkpoint(best, weights_only=True))
    untrained = fixture_task.SequenceRegressor()  # the exported file's weights are used, not the module's
    said = exported_model.use_export(untrained, exported_run / folder)
    served = predictions(untrained)
    if folder == "float":
        assert said.startswith(f"predict: runs {exported_run / 'float/model.pt2'} (torch.export), its float file")
        torch.testing.assert_close(served, eager, atol=1e-5, rtol=1e-5)
    else:
        report = json.loads((exported_run / "int8/quantization.json").read_text())
        chosen = report["recommended"]["file"]
        assert said.startswith(f"predict: runs {exported_run / 'int8' / chosen} (")
        assert "the file its quantization.json recommends" in said
        error = ((served - eager).square().sum() / eager.square().sum()).sqrt().item()
        assert error <= report["bound"]["max_output_error"]  # what the export checked on the same data
        if chosen != "model.pt2":
            assert error > 0  # quantized: close, not equal


def test_an_export_folder_without_its_recommended_file_is_named(exported_run: Path, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / "quantization.json").write_text((exported_run / "int8/quantization.json").read_text())
    assert exported_model.is_export_folder(folder)
    assert not exported_model.is_export_folder(exported_run / "checkpoints/best.ckpt")
    chosen = json.loads((folder / "quantization.json").read_text())["recommended"]["file"]
    with pytest.raises(ValueError, match=rf"quantization\.json recommends {re.escape(chosen)}, which is not in"):
        exported_model.exported_file(folder)


def test_the_predict_command_takes_an_export_folder_and_writes_its_outputs(
    run_cli: Callable[..., object], exported_run: Path, lightning_log: list[str]
) -> None:
    # The command a team runs: `predict --ckpt_path <export folder>`, its predictions written as from a checkpoint.
    run_cli("predict", *run_dir_flags(exported_run), f"--ckpt_path={exported_run / 'float'}", WRITER)
    said = f"predict: runs {exported_run / 'float/model.pt2'} (torch.export)"
    assert [line for line in lightning_log if line.startswith(said)] != []
    (folder,) = (exported_run / "predictions").iterdir()
    saved = torch.load(folder / "predictions.pt", weights_only=True)
    best = exported_run / "checkpoints/best.ckpt"
    eager = predictions(fixture_task.SequenceRegressor.load_from_checkpoint(best, weights_only=True))
    torch.testing.assert_close(saved["outputs"], eager, atol=1e-5, rtol=1e-5)
