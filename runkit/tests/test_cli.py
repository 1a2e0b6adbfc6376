"""The command line end to end on the fixture task: fit, validate, test, predict, resume, and bad input."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runkit.testing.faults import fault
from runkit.testing.support import run_dir_flags

RUN = Path("runs/fixture/cli")
STEPS_PER_EPOCH = 16  # fixture.yaml: 256 training sequences in batches of 16


@pytest.fixture
def fitted(run_cli: Callable[..., object]) -> object:
    return run_cli("fit", *run_dir_flags(RUN))


def test_fit_writes_checkpoints_events_and_config(fitted: object) -> None:
    steps = {}
    for name in ("best.ckpt", "last.ckpt"):
        checkpoint = torch.load(RUN / "checkpoints" / name, weights_only=True)
        steps[name] = checkpoint["global_step"]
        assert "net.3.weight" in checkpoint["state_dict"]
        assert checkpoint["hyper_parameters"]["input_shape"] == (16,)  # linked from the datamodule
    assert steps["last.ckpt"] == 2 * STEPS_PER_EPOCH
    assert steps["best.ckpt"] in {STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH}
    (events,) = RUN.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    assert {"train/loss_step", "train/grad_norm", "val/loss", "lr-AdamW"} <= set(accumulator.Tags()["scalars"])
    config = yaml.safe_load((RUN / "config.yaml").read_text())
    assert config["data"]["class_path"] == "fixture_task.SequenceData"
    assert config["trainer"]["max_epochs"] == 2


def test_validate_reproduces_the_best_score(
    fitted: object, run_cli: Callable[..., object], lightning_log: list[str]
) -> None:
    last = torch.load(RUN / "checkpoints" / "last.ckpt", weights_only=True)
    state = last["callbacks"]["BestCheckpoint"]
    assert state["monitor"] == "val/loss"
    for ckpt_path in ("best", str(RUN / "checkpoints" / "best.ckpt")):
        validated = run_cli("validate", *run_dir_flags(RUN), f"--ckpt_path={ckpt_path}")
        assert validated.trainer.callback_metrics["val/loss"] == pytest.approx(float(state["best_model_score"]))
    assert not [line for line in lightning_log if "no --ckpt_path" in line]  # these weights are trained


def test_test_and_predict(fitted: object, run_cli: Callable[..., object]) -> None:
    tested = run_cli("test", *run_dir_flags(RUN), "--ckpt_path=best")
    assert float(tested.trainer.callback_metrics["test/loss"]) > 0.0
    predicted = run_cli("predict", *run_dir_flags(RUN), "--ckpt_path=last")
    outputs = torch.cat(predicted.trainer.predict_loop.predictions)
    assert outputs.shape == (64, 1)
    # Predict builds no graph: Lightning runs it in inference mode.
    assert all(batch.is_inference() and not batch.requires_grad for batch in predicted.trainer.predict_loop.predictions)


def test_validate_without_a_checkpoint_says_it_measures_untrained_weights(
    run_cli: Callable[..., object], lightning_log: list[str]
) -> None:
    run_cli("validate", "--trainer.limit_val_batches=1")
    assert (
        "validate: no --ckpt_path, so this measures the weights the model was built with (freshly initialised,"
        " untrained); pass --ckpt_path best, last or a checkpoint file to measure a trained one"
    ) in lightning_log


def test_resume_from_saved_config(run_cli: Callable[..., object], cli: ModuleType) -> None:
    # The run crashes in its second epoch (once); the README's resume command finishes it.
    crash = fault("RaiseAtStep", step=STEPS_PER_EPOCH + 4, marker="crashed")
    with pytest.raises(RuntimeError, match="injected crash"):
        run_cli("fit", *run_dir_flags(RUN), crash)
    assert torch.load(RUN / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == STEPS_PER_EPOCH
    resumed = cli.build_cli(["fit", f"--config={RUN / 'config.yaml'}", "--ckpt_path=last"])
    assert resumed.trainer.global_step == 2 * STEPS_PER_EPOCH
    assert resumed.trainer.current_epoch == 2


def test_default_root_dir_moves_the_whole_run(run_cli: Callable[..., object]) -> None:
    run_cli("fit", "--trainer.default_root_dir=elsewhere", "--run.name=one", "--trainer.max_epochs=1")
    run = Path("elsewhere/fixture/one")
    assert {"config.yaml", "checkpoints"} <= {path.name for path in run.iterdir()}
    assert list(run.glob("events.out.tfevents.*"))
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert sorted(path.name for path in Path(".").iterdir()) == ["elsewhere"]  # nothing anywhere else


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_epoch=3"], "max_epoch"),  # misspelled flag (a prefix of the real one)
        (["--trainer.max_epochs=three"], "max_epochs"),  # wrong type
        (["--data.init_args.batchsize=3"], "batchsize"),  # misspelled nested key
        (["--config=missing.yaml"], "missing.yaml"),  # missing config file
        (["--ckpt_path=nowhere.ckpt"], "nowhere.ckpt"),  # missing checkpoint
        (["--model.init_args.lr=fast"], "lr"),
        (["--model.class_path=fixture_task.Nowhere"], "fixture_task.Nowhere"),  # a class that does not exist
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


def test_python_dash_m(run_process: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    # A project's console script calls the same main (its smoke test runs it); here, as `python -m`.
    fit = run_process("fit", *run_dir_flags(RUN), "--trainer.max_epochs=1")
    assert fit.returncode == 0, fit.stdout[-3000:]
    assert (RUN / "checkpoints" / "last.ckpt").is_file()
    validate = run_process("validate", *run_dir_flags(RUN), "--ckpt_path=best")
    assert validate.returncode == 0, validate.stdout[-3000:]
    assert "val/loss" in validate.stdout


@pytest.mark.parametrize(
    "subcommand",
    [
        ["validate", "--ckpt_path=last"],
        ["test", "--ckpt_path=best"],
        ["predict", "--ckpt_path=last"],
        ["export", "--ckpt_path=last"],
        ["schedule"],
        ["lr_find", "--num_training=16"],
        ["batch_size_find", "--max_trials=2"],
    ],
    ids=lambda args: args[0],
)
def test_a_runs_own_config_feeds_every_subcommand(cli: ModuleType, in_tmp: Path, subcommand: list[str]) -> None:
    run = in_tmp / "runs" / "fixture" / "trained"
    cli.build_cli(["fit", *run_dir_flags(run), "--trainer.max_epochs=1"])
    name, *args = subcommand
    if name == "export":
        pytest.importorskip("onnxscript", reason="export needs the export extra: pip install -e '.[export]'")
    code: object = 0
    try:
        cli.main([name, f"--config={run / 'config.yaml'}", *args])
    except SystemExit as stop:  # the subcommands that print and exit
        code = stop.code or 0
    assert code == 0
