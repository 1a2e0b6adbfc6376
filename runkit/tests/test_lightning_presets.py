"""The presets that only set Lightning's Trainer, doing on the fixture task what their headers say: ``fast_dev_run``
(one batch, nothing written), ``limit_batches`` (a tenth of each epoch), ``deterministic`` (one seed, one loss
sequence; another seed, another), ``bf16`` (bf16 compute, float32 weights and checkpoints) and ``fp16`` on a CPU (bf16,
with Lightning's warning). Moved here from the generated project's tests, which re-checked them on the example;
``test_agnostic_presets.py`` fits every preset on code that is not the example."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from support import config_flags

from runkit.testing import probes
from runkit.testing.support import run_dir_flags


def test_fast_dev_run_takes_one_batch_and_writes_nothing(run_cli: Callable[..., object], in_tmp: Path) -> None:
    built = run_cli("fit", *config_flags("debug/fast_dev_run"))
    assert built.trainer.global_step == 1
    assert built.trainer.num_val_batches == [1]
    assert not Path("runs").exists()  # no events, no checkpoints


def test_limit_batches_takes_a_fraction_of_each_epoch(run_cli: Callable[..., object]) -> None:
    # 1280 / 16 = 80 training and 320 / 16 = 20 validation batches; the preset keeps a tenth of each.
    sizes = ["--data.init_args.train_size=1280", "--data.init_args.val_size=320", "--trainer.max_epochs=1"]
    built = run_cli("fit", *config_flags("debug/limit_batches"), *sizes)
    assert built.trainer.num_training_batches == 8
    assert built.trainer.num_val_batches == [2]
    assert built.trainer.global_step == 8


def losses(run_cli: Callable[..., object], seed: int, name: str) -> list[float]:
    flags = [f"--seed_everything={seed}", "--trainer.max_epochs=1", *run_dir_flags(f"runs/{name}")]
    built = run_cli("fit", *config_flags("debug/tiny", "training/deterministic"), *flags)
    assert torch.are_deterministic_algorithms_enabled()
    assert built.trainer.global_step == 4
    return [value for _, value in probes.read_scalars(f"runs/{name}")["train/loss_step"]]


def test_same_seed_same_losses_other_seed_other_losses(run_cli: Callable[..., object]) -> None:
    first, again, other = losses(run_cli, 7, "first"), losses(run_cli, 7, "again"), losses(run_cli, 8, "other")
    assert len(first) == 4
    assert first == again  # bit for bit
    assert all(a != b for a, b in zip(first, other, strict=True))


def test_bf16_mixed_computes_in_bf16_and_keeps_float32_weights(run_cli: Callable[..., object]) -> None:
    recorder = "--trainer.callbacks+=runkit.testing.probes.OutputDtypeRecorder"
    built = run_cli("fit", *config_flags("debug/tiny", "precision/bf16"), "--trainer.accelerator=cpu", recorder)
    assert built.trainer.precision == "bf16-mixed"
    assert probes.find(built.trainer, probes.OutputDtypeRecorder).dtypes == {torch.bfloat16}
    assert torch.isfinite(built.trainer.callback_metrics["train/loss_epoch"])
    state = torch.load(Path(built.trainer.log_dir, "checkpoints/last.ckpt"), weights_only=True)["state_dict"]
    assert {value.dtype for name, value in state.items() if name.endswith("weight")} == {torch.float32}


def test_16_mixed_on_cpu_falls_back_to_bf16_with_a_warning(cli: ModuleType, in_tmp: Path) -> None:
    with pytest.warns(UserWarning, match="AMP with fp16 is not supported on CPU. Using `precision='bf16-mixed'`"):
        built = cli.build_cli([*config_flags("precision/fp16"), "--trainer.accelerator=cpu"], run=False)
    assert built.trainer.precision == "bf16-mixed"
    plugin = built.trainer.precision_plugin
    assert isinstance(plugin, MixedPrecision)
    assert (plugin.device, plugin.precision, plugin.scaler) == ("cpu", "bf16-mixed", None)
