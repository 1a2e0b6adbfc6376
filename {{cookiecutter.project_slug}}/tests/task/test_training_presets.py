"""EMA and early stopping on the example: stacked with other presets, and EMA's exact resume after SIGTERM or SIGKILL.

The resume runs use the example's data (a ``ResumableLoader``). On a plain ``DataLoader`` (the kit tests'
fixture task) even an epoch-boundary resume is not bit-exact on this version of the kit, with or without EMA:
the loader draws its base seed from the global RNG when Lightning creates the epoch's iterator, before the
RNG states are restored.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import EMAWeightAveraging
from runkit.testing import probes
from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, launch, run_dir_flags
from support import CONFIGS, PACKAGE, SMALL_RUN, runkit_module

early_stopping = runkit_module("parts.early_stopping")
EMA = [f"--config={CONFIGS / name}.yaml" for name in (*SMALL_RUN, "training/ema")]
# 4 optimizer steps per epoch (debug/tiny), 8 in 2 epochs; small images: the tests are about state, not speed.
SMALL = ["--data.init_args.image_size=16", "--data.init_args.num_workers=0", "--trainer.limit_val_batches=1"]
SETUP = [*EMA, *SMALL, "--trainer.enable_progress_bar=false"]
EXACT = ("state_dict", "current_model_state", "averaging_state", "optimizer_states", "lr_schedulers", "global_step")


def test_ema_and_early_stopping_stack_with_other_presets(run_cli: Callable[..., Any]) -> None:
    built = run_cli("fit", *SMALL, presets=(*SMALL_RUN, "training/ema", "training/early_stopping"))
    stopper = probes.find(built.trainer, early_stopping.EarlyStoppingOnBest)
    assert (stopper.monitor, stopper.mode) == ("val/acc", "max")  # best_checkpoint's, from default.yaml
    probes.find(built.trainer, EMAWeightAveraging)
    assert built.trainer.max_epochs == 2  # debug/tiny's length still holds
    last = torch.load(Path(built.trainer.log_dir, "checkpoints/last.ckpt"), weights_only=True)
    assert int(last["averaging_state"]["n_averaged"]) == built.trainer.global_step == 8


@pytest.fixture(scope="module")
def straight(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The final checkpoint of the EMA run that is never interrupted."""
    run = tmp_path_factory.mktemp("straight") / "run"
    cli.build_cli(["fit", *SETUP, *run_dir_flags(run)])
    return torch.load(run / "checkpoints/last.ckpt", weights_only=True)


def test_ema_resume_after_sigterm_is_bit_exact(cli: ModuleType, straight: dict[str, Any], tmp_path: Path) -> None:
    # SIGTERM as step 6 starts, mid-epoch 1: the step completes, last.ckpt is saved, the command exits 143.
    preempted = fault("SignalAtStep", step=5, signum=int(signal.SIGTERM), hook="start")
    with pytest.raises(SystemExit) as exit_info:
        cli.build_cli(["fit", *SETUP, *run_dir_flags(tmp_path), preempted])
    assert exit_info.value.code == 143
    assert_resumes_exactly(cli, straight, tmp_path, saved_step=6)


@pytest.mark.slow
def test_ema_resume_after_sigkill_is_bit_exact(cli: ModuleType, straight: dict[str, Any], tmp_path: Path) -> None:
    # last.ckpt every 2 steps: SIGKILL right after step 5 leaves the one of step 4, mid-epoch 1.
    every_2 = "--last_checkpoint.every_n_train_steps=2"
    run = tmp_path / "run"  # not tmp_path itself, where the launched process writes its log
    killed = launch(PACKAGE, "fit", *SETUP, every_2, *run_dir_flags(run), fault("SignalAtStep", step=5), cwd=tmp_path)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    assert_resumes_exactly(cli, straight, run, every_2, saved_step=4)


def assert_resumes_exactly(cli: ModuleType, straight: dict[str, Any], run: Path, *args: str, saved_step: int) -> None:
    """``run``'s last.ckpt holds the average at ``saved_step``; resumed, the run ends as the straight one."""
    saved = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    assert saved["global_step"] == saved_step
    assert int(saved["averaging_state"]["n_averaged"]) == saved_step  # one update per step, all in the checkpoint
    # Another global seed: a run that silently started over instead of resuming could not match.
    cli.build_cli(["fit", *SETUP, *args, *run_dir_flags(run), "--seed_everything=7", "--ckpt_path=last"])
    resumed = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    for key in EXACT:
        assert_identical(resumed[key], straight[key], key)
    assert_identical(resumed["callbacks"]["EMAWeightAveraging"], straight["callbacks"]["EMAWeightAveraging"], "ema")
