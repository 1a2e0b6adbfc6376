"""Mixed precision: bf16 autocast on CPU, fp16 with loss scaling on GPU, and what 16-mixed does on a CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from runkit.testing import probes
from support import CONFIGS, SMALL_RUN


def fit_and_check(run_cli: Callable[..., object], preset: str, logits: torch.dtype, *flags: str) -> object:
    """Fits with ``preset``: the network computes in ``logits`` dtype, weights and checkpoint stay float32."""
    built = run_cli(
        "fit",
        "--trainer.callbacks+=runkit.testing.probes.OutputDtypeRecorder",
        *flags,
        presets=(*SMALL_RUN, preset),
    )
    assert probes.find(built.trainer, probes.OutputDtypeRecorder).dtypes == {logits}
    assert torch.isfinite(built.trainer.callback_metrics["train/loss_epoch"])
    state = torch.load(Path(built.trainer.log_dir, "checkpoints/last.ckpt"), weights_only=True)["state_dict"]
    assert {value.dtype for name, value in state.items() if name.endswith("weight")} == {torch.float32}
    return built


def test_bf16_mixed_fit_on_cpu(run_cli: Callable[..., object]) -> None:
    built = fit_and_check(run_cli, "precision/bf16", torch.bfloat16, "--trainer.accelerator=cpu")
    assert built.trainer.precision == "bf16-mixed"


def test_16_mixed_on_cpu_falls_back_to_bf16_with_a_warning(cli: ModuleType, in_tmp: Path) -> None:
    configs = [f"--config={CONFIGS / name}.yaml" for name in ("default", "precision/fp16")]
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU. Using `precision='bf16-mixed'`"):
        built = cli.build_cli([*configs, "--trainer.accelerator=cpu"], run=False)
    assert built.trainer.precision == "bf16-mixed"
    plugin = built.trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision)
    assert (plugin.device, plugin.precision, plugin.scaler) == ("cpu", "bf16-mixed", None)


@pytest.mark.gpu
def test_16_mixed_on_gpu_scales_the_loss(run_cli: Callable[..., object]) -> None:
    built = fit_and_check(run_cli, "precision/fp16", torch.float16, "--trainer.accelerator=gpu", "--trainer.devices=1")
    assert built.trainer.precision == "16-mixed"
    assert isinstance(built.trainer.precision_plugin.scaler, torch.amp.GradScaler)
    assert built.trainer.precision_plugin.scaler.get_scale() > 1.0


@pytest.mark.gpu
def test_bf16_mixed_fit_on_gpu(run_cli: Callable[..., object]) -> None:
    built = fit_and_check(run_cli, "precision/bf16", torch.bfloat16, "--trainer.accelerator=gpu", "--trainer.devices=1")
    assert built.trainer.precision == "bf16-mixed"
