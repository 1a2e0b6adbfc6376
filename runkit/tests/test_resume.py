"""Exact resume: a run killed (SIGKILL) or preempted (SIGTERM) and resumed ends bit-identical to one that never stopped.

The fixture task is the ordinary user's case: a plain ``DataLoader(shuffle=True)`` over a map-style dataset that
augments from the torch, ``random`` and NumPy global RNGs, dropout, AdamW and a one-cycle schedule sized from
``estimated_stepping_batches``, nothing from the kit. 16 batches per epoch, 2 epochs: 32 optimizer steps.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from support import PACKAGE, TESTS, submodule

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, launch, run_dir_flags

EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")


def fit_in_process(cli: ModuleType, run: Path, *args: str) -> dict[str, Any]:
    cli.build_cli(["fit", *run_dir_flags(run), *args])
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


def resume_in_process(cli: ModuleType, run: Path, *args: str) -> dict[str, Any]:
    # Another global seed: a run that silently started over instead of resuming could not match.
    return fit_in_process(cli, run, *args, "--seed_everything=7", "--ckpt_path=last")


def launched_fit(run: Path, *args: str) -> Any:
    """A fit of the fixture task in a process of its own, run in the folder that holds ``runs/``."""
    return launch(PACKAGE, "fit", *run_dir_flags(run), *args, cwd=run.parents[2])


def position(checkpoint: dict[str, Any]) -> list[dict[str, int]]:
    return checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]


@pytest.fixture(scope="module")
def straight(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The final checkpoint of the run that is never interrupted (no workers)."""
    with pytest.MonkeyPatch.context() as patch:  # module scope: the autouse fixture has not run yet
        patch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "fixture.yaml"))
        patch.chdir(tmp_path_factory.mktemp("straight"))
        checkpoint = fit_in_process(cli, Path("runs/fixture/straight"), "--data.init_args.num_workers=0")
    assert checkpoint["global_step"] == 32
    assert position(checkpoint) == [{"epoch": 1, "batches": 16, "seed": 42}]
    return checkpoint


EPOCH_END = {16: {"epoch": 0, "batches": 16, "seed": 42}}
STEP_20 = {20: {"epoch": 1, "batches": 4, "seed": 42}}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("every_n_steps", "workers", "saved"),
    # Killed at step 22: the save of step 20 runs in the background and may not have committed by then (the
    # previous last.ckpt, of the epoch's end, then stays: test_background_save kills it at each moment).
    [(None, 0, EPOCH_END), (5, 2, {**STEP_20, **EPOCH_END})],
    ids=["epoch-boundary", "mid-epoch"],
)
def test_sigkill_then_resume_is_bit_exact(
    cli: ModuleType,
    straight: dict[str, Any],
    in_tmp: Path,
    lightning_log: list[str],
    every_n_steps: int | None,
    workers: int,
    saved: dict[int, dict[str, int]],
) -> None:
    run = in_tmp / "runs" / "fixture" / "killed"
    every_n = [f"--last_checkpoint.every_n_train_steps={every_n_steps}"] if every_n_steps else []
    # At the epoch boundary, the kill comes once the epoch end's save has committed (else no last.ckpt may be there).
    kill = fault("SignalAtStep", step=22, settled=every_n_steps is None)
    killed = launched_fit(run, f"--data.init_args.num_workers={workers}", *every_n, kill)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] in saved
    assert position(last) == [saved[last["global_step"]]]
    # Resume with the other worker count: the data, and so the result, must not depend on it.
    resumed = resume_in_process(cli, run, f"--data.init_args.num_workers={2 - workers}", *every_n)
    for key in EXACT:
        assert_identical(resumed[key], straight[key], key)
    assert any(line.startswith("Restored all states from the checkpoint at") for line in lightning_log)


@pytest.mark.slow
def test_sigterm_mid_epoch_finishes_the_step_saves_exits_143_and_resumes_exactly(
    cli: ModuleType, straight: dict[str, Any], in_tmp: Path
) -> None:
    run = in_tmp / "runs" / "fixture" / "preempted"
    # SIGTERM arrives before the 5th batch of epoch 1 (global step 20): that step is completed, then saved.
    stopped = launched_fit(
        run, "--data.init_args.num_workers=2", fault("SignalAtStep", step=20, signum=signal.SIGTERM, hook="start")
    )
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    assert "Preemption: saved" in stopped.stdout
    saved = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 21
    assert position(saved) == [{"epoch": 1, "batches": 5, "seed": 42}]
    resumed = resume_in_process(cli, run, "--data.init_args.num_workers=2")
    for key in EXACT:
        assert_identical(resumed[key], straight[key], key)


def test_rng_states_round_trip_through_a_weights_only_load(tmp_path: Path) -> None:
    resume = submodule("safety.resume")
    state = resume.collect_rng_state()
    torch.save({"rng": state}, tmp_path / "state.pt")
    expected = (random.random(), np.random.rand(), torch.rand(3))
    loaded = torch.load(tmp_path / "state.pt", weights_only=True)["rng"]
    resume.restore_rng_state(loaded)
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(3), expected[2])


@pytest.mark.parametrize("schedule", ["plateau", "step"])
def test_epoch_schedules_resume_exactly_after_stops_mid_epoch_and_at_an_epoch_end(
    cli: ModuleType, in_tmp: Path, schedule: str
) -> None:
    # ReduceLROnPlateau on val/loss (it reduces the LR after every epoch but the first) and StepLR by epoch, as
    # lightning-hydra-template's modules configure them. Lightning skips a plateau scheduler at the end of the
    # epoch a run resumed into: the LR then stayed 10x too high.
    flags = [f"--model.init_args.schedule={schedule}", "--trainer.max_epochs=4"]
    expected = fit_in_process(cli, Path("runs/fixture/straight"), *flags)
    # The last checkpoint is written before the last epoch's plateau step, after its StepLR step.
    last_lr = 0.01 * 0.1**2 if schedule == "plateau" else 0.01 * 0.5**4
    assert expected["lr_schedulers"][0]["_last_lr"] == [pytest.approx(last_lr)]
    run = Path("runs/fixture/stopped")
    sigterm = int(signal.SIGTERM)
    with pytest.raises(SystemExit):  # mid-epoch 1
        fit_in_process(cli, run, *flags, fault("SignalAtStep", step=20, signum=sigterm))
    with pytest.raises(SystemExit):  # resumed, then stopped as that same epoch ends: its plateau step is owed
        fit_in_process(cli, run, *flags, "--ckpt_path=last", fault("SignalAtEpochEnd", epoch=1))
    owed = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    assert owed["global_step"] == 32
    if schedule == "plateau":
        (state,) = [state for name, state in owed["callbacks"].items() if name.startswith("PlateauResume")]
        assert list(state["owed"]) == ["0"]  # taken, with the metric saved here, by the run that resumes
    with pytest.raises(SystemExit):  # resumed at the epoch boundary, stopped in the last validation batch of epoch 2
        fit_in_process(cli, run, *flags, "--ckpt_path=last", fault("SignalInValidation", epoch=2, batch=3))
    resumed = fit_in_process(cli, run, *flags, "--ckpt_path=last")
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)
    # Lightning's count of scheduler steps too (the plateau step the kit takes for it was not counted: 1 vs 2).
    progress = "epoch_loop.scheduler_progress"
    assert resumed["loops"]["fit_loop"][progress] == expected["loops"]["fit_loop"][progress]
