"""``configs/training/ema.yaml`` resumes bit-exactly: a fit with Lightning's ``EMAWeightAveraging`` stopped by SIGTERM
mid-epoch and resumed with ``--ckpt_path last`` ends with the checkpoint of the fit that never stopped, the average
included. Moved here from the generated project's tests, which re-checked it on the example."""

from __future__ import annotations

import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from support import config_flags

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, last_checkpoint, run_dir_flags

SETUP = config_flags("debug/tiny", "training/ema")  # 4 optimizer steps per epoch, 8 in 2 epochs
EXACT = ("state_dict", "current_model_state", "averaging_state", "optimizer_states", "lr_schedulers", "global_step")


@pytest.fixture(scope="module")
def straight(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The final checkpoint of the EMA run that is never interrupted."""
    run = tmp_path_factory.mktemp("straight") / "run"
    cli.build_cli(["fit", *SETUP, *run_dir_flags(run)])
    return last_checkpoint(run)


def test_ema_resume_after_sigterm_is_bit_exact(cli: ModuleType, straight: dict[str, Any], tmp_path: Path) -> None:
    # SIGTERM as step 6 starts, mid-epoch 1: the step completes, last.ckpt is saved, the command exits 143.
    preempted = fault("SignalAtStep", step=5, signum=int(signal.SIGTERM), hook="start")
    with pytest.raises(SystemExit) as exit_info:
        cli.build_cli(["fit", *SETUP, *run_dir_flags(tmp_path), preempted])
    assert exit_info.value.code == 143
    saved = last_checkpoint(tmp_path)
    assert saved["global_step"] == 6
    assert int(saved["averaging_state"]["n_averaged"]) == 6  # one update per step, all in the checkpoint
    # Another global seed: a run that silently started over instead of resuming could not match.
    cli.build_cli(["fit", *SETUP, *run_dir_flags(tmp_path), "--seed_everything=7", "--ckpt_path=last"])
    resumed = torch.load(tmp_path / "checkpoints/last.ckpt", weights_only=True)
    for key in EXACT:
        assert_identical(resumed[key], straight[key], key)
    assert_identical(resumed["callbacks"]["EMAWeightAveraging"], straight["callbacks"]["EMAWeightAveraging"], "ema")
