"""The FSDP presets on the example's transformer (one unit per block): valid on any machine, and on a GPU it trains
checkpoints that load without FSDP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from example import SMALL_RUN
from support import PACKAGE

STACK = (*SMALL_RUN, "example/transformer", "distributed/fsdp", "example/fsdp")


def test_fsdp_preset_parses(run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str]) -> None:
    # Parsing checks every key against FSDPStrategy's signature; instantiating needs a GPU (tests/test_configs.py).
    with pytest.raises(SystemExit) as exit_info:
        run_cli("fit", "--print_config", presets=STACK)
    assert exit_info.value.code == 0
    strategy = yaml.safe_load(capsys.readouterr().out)["trainer"]["strategy"]
    assert strategy["class_path"] == "lightning.pytorch.strategies.FSDPStrategy"
    assert strategy["init_args"]["auto_wrap_policy"] == [f"{PACKAGE}.task.networks.Block"]
    assert strategy["init_args"]["state_dict_type"] == "full"


@pytest.mark.slow
@pytest.mark.gpu  # FSDP runs on CUDA GPUs only
def test_fsdp_checkpoint_loads_without_fsdp(run_cli: Callable[..., object]) -> None:
    fitted = run_cli("fit", f"--trainer.devices={torch.cuda.device_count()}", presets=STACK)
    assert type(fitted.trainer.strategy).__name__ == "FSDPStrategy"
    checkpoint = torch.load(
        Path(fitted.trainer.log_dir, "checkpoints/best.ckpt"), map_location="cpu", weights_only=True
    )
    assert "network.blocks.0.attn.qkv.weight" in checkpoint["state_dict"]  # whole tensors, plain keys
    # The same checkpoint loads into a plain model on one device, exactly, and validates to about its score
    # (FSDP computes in bf16 weights, plain bf16-mixed autocasts fp32 weights: a sample may flip).
    flags = ("--ckpt_path=best", "--trainer.devices=1", "--trainer.precision=bf16-mixed")
    validated = run_cli("validate", *flags, presets=STACK[:2])
    for key, value in validated.model.state_dict().items():
        assert torch.equal(value.cpu(), checkpoint["state_dict"][key]), key
    score = fitted.trainer.checkpoint_callback.best_model_score
    assert validated.trainer.callback_metrics["val/acc"].item() == pytest.approx(score.item(), abs=2 / 64)
