"""configs/training/ema.yaml: validation and checkpoints use the averaged weights (exact resume: tests/task)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from support import CONFIGS

from runkit.testing.support import run_dir_flags

EMA = f"--config={CONFIGS / 'training/ema.yaml'}"
# 64 sequences in batches of 16: 4 optimizer steps per epoch, 12 in 3 epochs.
SHORT = ["--data.init_args.train_size=64", "--trainer.max_epochs=3"]


def val_loss(run_cli: Callable[..., Any], run: Path, ckpt_path: str) -> float:
    """The validation loss of a checkpoint, evaluated without the EMA callback."""
    validated = run_cli("validate", *SHORT, *run_dir_flags(run), f"--ckpt_path={ckpt_path}")
    return float(validated.trainer.callback_metrics["val/loss"])


def test_validation_and_checkpoints_use_the_averaged_weights(run_cli: Callable[..., Any], in_tmp: Path) -> None:
    run = in_tmp / "runs/fixture/ema"
    fitted = run_cli("fit", EMA, *SHORT, *run_dir_flags(run))
    logged = float(fitted.trainer.callback_metrics["val/loss"])  # the last epoch's validation
    best_score = float(fitted.trainer.checkpoint_callback.best_model_score)
    last = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    assert int(last["averaging_state"]["n_averaged"]) == 12  # one update per optimizer step
    # The averaged weights are what the checkpoint's state_dict holds, and what validation saw.
    assert val_loss(run_cli, run, "last") == logged
    assert val_loss(run_cli, run, "best") == best_score
    # The raw weights, kept beside them for resuming, validate differently.
    torch.save({**last, "state_dict": last["current_model_state"]}, in_tmp / "raw.ckpt")
    assert val_loss(run_cli, run, str(in_tmp / "raw.ckpt")) != logged
