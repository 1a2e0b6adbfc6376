"""The command line end to end: fit, validate, test, predict, and errors for bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from support import CONFIGS, PACKAGE
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

RUN = Path("runs/debug")


@pytest.fixture
def fitted(run_cli: Callable[..., object]) -> object:
    return run_cli("fit")


def test_fit_writes_checkpoints_events_and_config(fitted: object) -> None:
    steps = {}
    for name in ("best.ckpt", "last.ckpt"):
        checkpoint = torch.load(RUN / "checkpoints" / name, weights_only=True)
        steps[name] = checkpoint["global_step"]
        assert "network.head.2.weight" in checkpoint["state_dict"]
    assert steps["last.ckpt"] == 8  # 2 epochs x 4 batches
    assert steps["best.ckpt"] in {4, 8}
    (events,) = RUN.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert {"train/loss_step", "train/grad_norm", "val/acc", "val/loss"} <= set(accumulator.Tags()["scalars"])
    config = yaml.safe_load((RUN / "config.yaml").read_text())
    assert config["data"]["class_path"] == f"{PACKAGE}.gratings.GratingsDataModule"
    assert config["trainer"]["max_epochs"] == 2


def test_validate_reproduces_the_best_score(fitted: object, run_cli: Callable[..., object]) -> None:
    last = torch.load(RUN / "checkpoints" / "last.ckpt", weights_only=True)
    (state,) = [value for key, value in last["callbacks"].items() if "'monitor': 'val/acc'" in key]
    for ckpt_path in ("best", str(RUN / "checkpoints" / "best.ckpt")):
        validated = run_cli("validate", f"--ckpt_path={ckpt_path}")
        assert validated.trainer.callback_metrics["val/acc"] == pytest.approx(float(state["best_model_score"]))


def test_test_and_predict(fitted: object, run_cli: Callable[..., object]) -> None:
    tested = run_cli("test", "--ckpt_path=best")
    assert 0.0 <= float(tested.trainer.callback_metrics["test/acc"]) <= 1.0
    predicted = run_cli("predict", "--ckpt_path=last")
    probabilities = torch.cat(predicted.trainer.predict_loop.predictions)
    assert probabilities.shape == (64, 10)
    torch.testing.assert_close(probabilities.sum(dim=1), torch.ones(64))
    assert (probabilities >= 0).all()
    # Predict builds no graph: Lightning runs it in inference mode.
    assert all(batch.is_inference() and not batch.requires_grad for batch in predicted.trainer.predict_loop.predictions)


def test_resume_from_saved_config(fitted: object, run_cli: Callable[..., object], cli: object) -> None:
    resumed = cli.build_cli(["fit", f"--config={RUN / 'config.yaml'}", "--trainer.max_epochs=3", "--ckpt_path=last"])
    assert resumed.trainer.global_step == 12
    assert resumed.trainer.current_epoch == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_epoch=3"], "max_epoch"),  # misspelled flag (a prefix of the real one)
        (["--trainer.max_epochs=three"], "max_epochs"),  # wrong type
        (["--data.init_args.batchsize=3"], "batchsize"),  # misspelled nested key
        (["--config=missing.yaml"], "missing.yaml"),  # missing config file
        (["--ckpt_path=nowhere.ckpt"], "nowhere.ckpt"),  # missing checkpoint
        (["--model.optimizer.init_args.lr=fast"], "lr"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", *args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not Path("runs").exists()  # nothing half-written


def test_misspelled_key_in_yaml_is_an_error(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    Path("typo.yaml").write_text("trainer:\n  max_epocs: 3\n")
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--config=typo.yaml")
    assert exit_info.value.code == 2
    assert "max_epocs" in capsys.readouterr().err


def test_best_without_a_run_names_the_missing_file(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("validate", "--ckpt_path=best")
    assert exit_info.value.code == 2
    assert "best.ckpt" in capsys.readouterr().err


def test_python_dash_m_and_console_script(run_process: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    configs = [f"--config={CONFIGS / name}.yaml" for name in ("default", "debug/tiny")]
    fit = run_process("fit", *configs, "--trainer.enable_progress_bar=false")
    assert fit.returncode == 0, fit.stdout[-3000:]
    assert (RUN / "checkpoints" / "last.ckpt").is_file()
    # The console script sits next to this interpreter, even when its environment is not activated.
    script = shutil.which(PACKAGE, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert script, f"console script {PACKAGE} is not installed"
    validate = subprocess.run(
        [script, "validate", *configs, "--ckpt_path=best"], capture_output=True, text=True, timeout=300
    )
    assert validate.returncode == 0, validate.stderr[-3000:]
    assert "val/acc" in validate.stdout
