"""Stopping on a signal (SIGTERM, Ctrl-C): within one batch in every loop, a checkpoint only from ``fit``, and a
resume that ends bit-identical to the run that never stopped. In process: the signals go to this process."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import PACKAGE
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, fit_exit_code, last_checkpoint, launch, run_dir_flags

STEPS = 32  # fixture.yaml: 2 epochs x 16 batches; 4 validation batches per epoch
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")


def statuses(run: Path) -> list[str]:
    return [session["status"] for session in yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]]


@pytest.fixture(scope="module")
def straight(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run that is never interrupted."""
    run = tmp_path_factory.mktemp("straight") / "runs" / "fixture" / "straight"
    assert fit_exit_code(cli, run) == 0
    return run


def assert_same_training(run: Path, straight: Path) -> None:
    """The final training state of ``run`` is bit-identical to the uninterrupted run's."""
    resumed, expected = last_checkpoint(run), last_checkpoint(straight)
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)


def scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """The run's curves as TensorBoard shows them: every events file of the folder, purged steps dropped."""
    accumulator = EventAccumulator(str(run), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


@pytest.mark.parametrize("batch", [1, 3])  # a middle batch, the last batch
def test_sigterm_in_fits_validation_stops_within_a_batch_and_resumes_exactly(
    cli: ModuleType, straight: Path, tmp_path: Path, batch: int
) -> None:
    run, report = tmp_path / "runs" / "fixture" / "cut", tmp_path / "report.json"
    cut = fault("SignalInValidation", epoch=0, batch=batch, report=str(report))
    assert fit_exit_code(cli, run, cut) == 143
    assert json.loads(report.read_text()) == {"batches_after_signal": 1}  # not the rest of the pass
    assert last_checkpoint(run)["global_step"] == 16  # the training step boundary before the validation
    # Another seed: a run that silently started over could not match.
    assert fit_exit_code(cli, run, "--ckpt_path=last", "--seed_everything=7") == 0
    assert_same_training(run, straight)
    best, expected_best = (torch.load(r / "checkpoints/best.ckpt", weights_only=True) for r in (run, straight))
    assert best["global_step"] == expected_best["global_step"]
    # One curve: every step once, the cut validation run again in full.
    curves, expected = scalars(run), scalars(straight)
    for tag in ("train/loss_step", "lr-AdamW", "val/loss"):
        assert curves[tag] == expected[tag], tag
    assert statuses(run) == ["preempted", "finished"]


def test_ctrl_c_saves_at_a_step_boundary_exits_130_and_resumes_exactly(
    cli: ModuleType, straight: Path, tmp_path: Path
) -> None:
    run = tmp_path / "runs" / "fixture" / "interrupted"
    # Ctrl-C while the last batch of epoch 0 runs: its step completes, the validation that follows is not run.
    assert fit_exit_code(cli, run, fault("SignalAtStep", step=15, signum=int(signal.SIGINT), hook="start")) == 130
    assert last_checkpoint(run)["global_step"] == 16
    assert fit_exit_code(cli, run, "--ckpt_path=last", "--seed_everything=7") == 0
    assert_same_training(run, straight)
    assert statuses(run) == ["interrupted", "finished"]


def test_second_ctrl_c_stops_at_once(cli: ModuleType, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fixture" / "twice"
    assert (
        fit_exit_code(cli, run, fault("SignalAtStep", step=3, signum=int(signal.SIGINT), hook="start", repeat=2)) == 130
    )
    assert not (run / "checkpoints" / "last.ckpt").exists()  # stopped inside the step: nothing whole to save
    assert statuses(run) == ["interrupted"]


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_sigterm_outside_fit_exits_143_within_a_batch_and_writes_no_checkpoint(
    cli: ModuleType, straight: Path, tmp_path: Path, subcommand: str
) -> None:
    checkpoints = {path.name: path.read_bytes() for path in (straight / "checkpoints").iterdir()}
    report = tmp_path / "report.json"
    with pytest.raises(SystemExit) as stopped:
        cli.build_cli(
            [
                subcommand,
                *run_dir_flags(straight),
                "--ckpt_path=last",
                fault("SignalInValidation", batch=1, report=str(report)),
            ]
        )
    assert stopped.value.code == 143
    assert json.loads(report.read_text()) == {"batches_after_signal": 1}
    assert {path.name: path.read_bytes() for path in (straight / "checkpoints").iterdir()} == checkpoints


def test_ctrl_c_outside_fit_exits_130(cli: ModuleType, straight: Path) -> None:
    interrupt = fault("SignalInValidation", batch=1, signum=int(signal.SIGINT))
    with pytest.raises(SystemExit) as stopped:
        cli.build_cli(["validate", *run_dir_flags(straight), "--ckpt_path=last", interrupt])
    assert stopped.value.code == 130


def test_nohup_keeps_sighup_ignored_and_the_run_goes_on(tmp_path: Path) -> None:
    # `nohup <package> fit ... &`, then the terminal closes: SIGHUP reaches the run, which nohup started ignoring it.
    run = tmp_path / "runs" / "fixture" / "nohup"
    hangup = fault("SignalAtStep", step=5, signum=int(signal.SIGHUP))
    done = launch(PACKAGE, "fit", *run_dir_flags(run), hangup, cwd=tmp_path, wrapper=("nohup",))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "SIGHUP ignored as this command started (nohup, or a background job): they will not stop it" in done.stdout
    assert last_checkpoint(run)["global_step"] == STEPS
    assert statuses(run) == ["finished"]
