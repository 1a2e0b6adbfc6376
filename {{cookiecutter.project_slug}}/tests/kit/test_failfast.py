"""Fail fast, say where: a non-finite loss stops the run at its step; input checks find NaN/Inf, no false alarms."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from faults import fault
from support import run_dir_flags, submodule

RUN = Path("runs/fixture/nan")


def test_nan_loss_stops_at_its_step_and_keeps_the_last_finite_checkpoint(cli: ModuleType, in_tmp: Path) -> None:
    # 16 steps per epoch: step 20 is batch 4 of epoch 1; last.ckpt was written at the end of epoch 0.
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *run_dir_flags(RUN), fault("NaNInputAtStep", step=20)])
    message = str(exit_info.value.code)  # a message, not a number: the process exits 1
    assert message.startswith("error: training loss is nan at global step 20 (epoch 1, batch 4)")
    assert "--trainer.precision 32-true" in message
    for name in ("last.ckpt", "best.ckpt"):
        checkpoint = torch.load(RUN / "checkpoints" / name, weights_only=True)
        assert checkpoint["global_step"] == 16
        assert all(torch.isfinite(value).all() for value in checkpoint["state_dict"].values())
    assert sorted(path.name for path in (RUN / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


def test_large_finite_values_are_not_mistaken_for_inf() -> None:
    data_checks = submodule("kit.safety.data_checks")
    images = torch.full((3, 1, 2, 2), 3e38)  # finite, but each sample's sum overflows float32
    data_checks.check_samples("train", images, torch.zeros(3, dtype=torch.int64), 10, (1, 2, 2))
    images[1, 0, 1, 1] = float("-inf")
    with pytest.raises(ValueError, match="train sample 1: contains NaN or Inf values"):
        data_checks.check_samples("train", images, torch.zeros(3, dtype=torch.int64), 10, (1, 2, 2))
