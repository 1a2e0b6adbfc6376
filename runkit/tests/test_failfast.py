"""Fail fast, say where: a non-finite loss or weight stops the run at its step, and no checkpoint ever holds one;
input checks find NaN/Inf, no false alarms."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import submodule

from runkit.testing.faults import fault
from runkit.testing.support import refused, run_dir_flags

RUN = Path("runs/fixture/nan")


def test_nan_loss_stops_at_its_step_and_keeps_the_last_finite_checkpoint(cli: ModuleType, in_tmp: Path) -> None:
    # 16 steps per epoch: step 20 is batch 4 of epoch 1; last.ckpt was written at the end of epoch 0.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *run_dir_flags(RUN), fault("NaNInputAtStep", step=20)])
    message = str(exit_info.value.code)  # a message, not a number: the process exits 1
    assert message.startswith("error: training loss is nan at global step 20 (epoch 1, batch 4)")
    assert f"{RUN}/checkpoints/last.ckpt (step 16) holds the last saved state" in message
    assert "--trainer.precision 32-true" in message
    for name in ("last.ckpt", "best.ckpt"):
        checkpoint = torch.load(RUN / "checkpoints" / name, weights_only=True)
        assert checkpoint["global_step"] == 16
        assert all(torch.isfinite(value).all() for value in checkpoint["state_dict"].values())
    assert sorted(path.name for path in (RUN / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


def test_large_finite_values_are_not_mistaken_for_inf() -> None:
    data_checks = submodule("safety.data_checks")
    images = torch.full((3, 1, 2, 2), 3e38)  # finite, but each sample's sum overflows float32
    data_checks.check_samples("train", images, torch.zeros(3, dtype=torch.int64), 10, (1, 2, 2))
    images[1, 0, 1, 1] = float("-inf")
    with pytest.raises(ValueError, match="train sample 1: contains NaN or Inf values"):
        data_checks.check_samples("train", images, torch.zeros(3, dtype=torch.int64), 10, (1, 2, 2))


def assert_all_finite(checkpoint: dict) -> None:
    tensors = [*checkpoint["state_dict"].values()]
    tensors += [v for state in checkpoint["optimizer_states"][0]["state"].values() for v in state.values()]
    assert all(torch.isfinite(value).all() for value in tensors if value.is_floating_point())


@pytest.mark.parametrize(
    ("step", "epoch", "saved"), [(20, 1, 16), (15, 0, None)], ids=["mid-epoch", "before-the-epoch-end-save"]
)
def test_an_update_that_leaves_non_finite_weights_stops_at_its_step_and_saves_none(
    cli: ModuleType, in_tmp: Path, step: int, epoch: int, saved: int | None
) -> None:
    # The loss is finite; the step after it makes a weight infinite (what lr 1e6 does to the example's weights).
    # An early stopping on val/loss would otherwise end the run first, with exit 0 and NaN checkpoints.
    stopper = ["--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping", "--trainer.callbacks.monitor=val/loss"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *run_dir_flags(RUN), fault("InfWeightAfterBackward", step=step), *stopper])
    message = str(exit_info.value.code)
    assert message.startswith(f"error: weights are non-finite after optimizer step {step + 1} (epoch {epoch}): net.0")
    assert "net.0.weight (1 tensor)" in message
    if saved is None:
        assert "no checkpoint was saved yet" in message
        assert not (RUN / "checkpoints").exists()
    else:
        assert f"{RUN}/checkpoints/last.ckpt (step {saved}) holds the last saved state" in message
        for name in ("last.ckpt", "best.ckpt"):
            checkpoint = torch.load(RUN / "checkpoints" / name, weights_only=True)
            assert checkpoint["global_step"] == saved
            assert_all_finite(checkpoint)
    session = yaml.safe_load((RUN / "provenance.yaml").read_text())["sessions"][-1]
    assert session["status"] == "nonfinite"
    assert session["error"].startswith(f"weights are non-finite after optimizer step {step + 1}")


def test_the_checkpoint_writer_refuses_nan_and_keeps_the_file(tmp_path: Path) -> None:
    checkpoint_io = submodule("safety.checkpoint_io").AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    good = {"state_dict": {"w": torch.ones(3)}, "optimizer_states": [{"state": {0: {"exp_avg": torch.zeros(3)}}}]}
    checkpoint_io.save_checkpoint(good, path)
    written = path.read_bytes()
    nan = torch.tensor([0.0, float("nan"), 0.0])
    bad = {**good, "global_step": 7, "optimizer_states": [{"state": {0: {"exp_avg": nan}}}]}
    with pytest.raises(submodule("safety.nonfinite").NonFiniteCheckpointError) as error:
        checkpoint_io.save_checkpoint(bad, path)
    assert str(error.value).startswith(
        f"refused to write {path} at global step 7: optimizer_states.0.state.0.exp_avg (1 tensor) hold NaN or Inf"
    )
    assert path.read_bytes() == written
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


@pytest.fixture
def nan_checkpoint(cli: ModuleType, in_tmp: Path) -> Path:
    """A checkpoint of the fixture task with one NaN weight, as written by something other than this kit."""
    cli.build_cli(["fit", *run_dir_flags(RUN), "--trainer.max_epochs=1"])
    checkpoint = torch.load(RUN / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["state_dict"]["net.3.bias"][0] = float("nan")
    path = in_tmp / "nan.ckpt"
    torch.save(checkpoint, path)
    return path


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict", "export"])
def test_evaluating_or_exporting_a_non_finite_checkpoint_is_refused(
    cli: ModuleType, nan_checkpoint: Path, capsys: pytest.CaptureFixture[str], subcommand: str
) -> None:
    error = refused(capsys, lambda: cli.main([subcommand, f"--ckpt_path={nan_checkpoint}"]))
    assert error == (
        f"error: checkpoint {nan_checkpoint} holds NaN or Inf in state_dict.net.3.bias (1 tensor): its numbers are"
        " no result to evaluate, export or resume from (a run of this kit never writes one; take an earlier"
        " checkpoint of its run)"
    )


@pytest.mark.slow
def test_a_nan_loss_on_one_ddp_process_stops_both_at_the_same_step(run_process: Callable[..., object]) -> None:
    # Process 1 alone sees a NaN loss; stopping it alone would leave process 0 waiting for its gradients forever.
    flags = ["--trainer.devices=2", "--trainer.strategy=ddp", *run_dir_flags(RUN)]
    done = run_process("fit", *flags, fault("NaNInputAtStep", step=3, rank=1), timeout=120)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "error: weights are non-finite after optimizer step 4 (epoch 0)" in done.stdout
    session = yaml.safe_load((RUN / "provenance.yaml").read_text())["sessions"][-1]
    assert session["status"] == "nonfinite"
    assert not (RUN / "checkpoints").exists()
