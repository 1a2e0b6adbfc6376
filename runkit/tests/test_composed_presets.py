"""The training presets compose in one command: bf16 + accumulation + norm clipping + 2-process DDP on the fixture
task, then ``--ckpt_path last`` from the saved config goes on from there. Moved here from the generated project's
tests, which ran it on the example (compiled, on its transformer). Two processes twice: marked ``faults``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from support import PACKAGE, config_flags

from runkit.testing import probes
from runkit.testing.support import launch, run_dir_flags

pytestmark = [pytest.mark.slow, pytest.mark.faults]
COMPOSED = ("precision/bf16", "training/accumulate", "training/clip_norm", "distributed/ddp")


def test_training_presets_at_once_with_ddp_then_resume(tmp_path: Path) -> None:
    run = tmp_path / "runs/composed"
    result = launch(
        PACKAGE,
        "fit",
        *config_flags(*COMPOSED),
        "--trainer.devices=2",
        "--trainer.accelerator=cpu",
        "--model.init_args.schedule=step",  # a schedule by epoch, which a longer run can continue
        *run_dir_flags(run),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-5000:]
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["trainer"]["precision"] == "bf16-mixed"
    assert config["trainer"]["accumulate_grad_batches"] == 4
    assert config["trainer"]["gradient_clip_val"] == 1.0
    assert config["trainer"]["strategy"]["class_path"] == "lightning.pytorch.strategies.DDPStrategy"
    checkpoint = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 4  # 2 epochs x 8 batches per process / 4 accumulated
    assert all(torch.isfinite(value).all() for value in checkpoint["state_dict"].values())
    assert [step for step, _ in probes.read_scalars(run)["train/grad_norm"]] == [0, 1, 2, 3]

    # Resume from the saved config (the same stack, DDP included) and the last checkpoint, for one more epoch.
    resumed = launch(
        PACKAGE, "fit", f"--config={run / 'config.yaml'}", "--ckpt_path=last", "--trainer.max_epochs=3", cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stdout[-5000:]
    checkpoint = torch.load(run / "checkpoints/last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 6
    assert all(torch.isfinite(value).all() for value in checkpoint["state_dict"].values())
    assert [step for step, _ in probes.read_scalars(run)["train/grad_norm"]] == [0, 1, 2, 3, 4, 5]
