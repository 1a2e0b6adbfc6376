"""configs/training/early_stopping.yaml: stops on the monitored metric, keeps best.ckpt, says why in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from support import CONFIGS, submodule

from runkit.testing import probes
from runkit.testing.support import run_dir_flags

early_stopping = submodule("parts.early_stopping")


def test_training_stops_when_the_monitored_metric_stalls(
    run_cli: Callable[..., Any], in_tmp: Path, lightning_log: list[str]
) -> None:
    run = in_tmp / "runs/fixture/stop"
    stalled = [
        "--model.init_args.lr=0",  # the weights never change, so val/loss never improves after the first epoch
        "--data.init_args.train_size=32",  # 2 steps per epoch
        "--trainer.max_epochs=10",
    ]
    fitted = run_cli("fit", f"--config={CONFIGS / 'training/early_stopping.yaml'}", *stalled, *run_dir_flags(run))
    stopper = probes.find(fitted.trainer, early_stopping.EarlyStoppingOnBest)
    assert (stopper.monitor, stopper.mode, stopper.patience) == ("val/loss", "min", 3)  # best_checkpoint's metric
    # Epoch 0 sets the best; epochs 1, 2 and 3 do not improve on it: patience 3 is spent after epoch 3.
    assert stopper.stopped_epoch == 3
    assert fitted.trainer.global_step == 8
    best = fitted.trainer.checkpoint_callback
    assert float(best.best_model_score) == float(stopper.best_score)
    assert Path(best.best_model_path) == run / "checkpoints/best.ckpt"
    assert torch.load(best.best_model_path, weights_only=True)["epoch"] == 0
    assert (
        f"Early stopping after epoch 3: val/loss did not improve for 3 validations (patience 3);"
        f" best val/loss {float(stopper.best_score):.6g}; {run / 'checkpoints/best.ckpt'} holds it"
    ) in lightning_log
