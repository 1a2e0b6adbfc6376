"""Every preset runs on its own, as its header says (`<pkg> fit -c configs/<group>/<preset>.yaml`), for a few steps.

test_configs.py proves each one parses and instantiates; this runs it. Small data and two steps: the point is
that nothing in a preset depends on another file than configs/default.yaml, which every command loads first.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from support import CONFIGS

TRAINING_PRESETS = sorted(
    str(path.relative_to(CONFIGS).with_suffix(""))
    for path in CONFIGS.rglob("*.yaml")
    if path.parent != CONFIGS and path.parent.name not in {"predict", "search", "data"}
)
SKIP = {  # distributed/fsdp needs CUDA GPUs: marked `gpu`
    "model/compile": "compiles for ~25 s cold on a CPU: test_compile.py fits it (stacked on the transformer)",
}
FEW_STEPS = [  # two steps and a validation: what an epoch does, in brief
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
]
SMALL_GRATINGS = [f"--data.init_args.{key}={value}" for key, value in {"train_size": 256, "val_size": 32,
                  "test_size": 32, "batch_size": 16}.items()]  # fmt: skip


def test_training_presets_are_found() -> None:
    assert {"debug/tiny", "model/transformer", "precision/bf16", "training/accumulate"} <= set(TRAINING_PRESETS)


@pytest.mark.parametrize(
    "preset", [pytest.param(p, marks=pytest.mark.gpu) if p == "distributed/fsdp" else p for p in TRAINING_PRESETS]
)
def test_preset_alone_fits(cli: ModuleType, in_tmp: Path, preset: str) -> None:
    if preset == "model/compile":
        pytest.skip(SKIP[preset])
    fitted = cli.build_cli(["fit", f"--config={CONFIGS / preset}.yaml", *FEW_STEPS, *SMALL_GRATINGS])
    assert fitted.trainer.global_step >= 1
    assert torch.isfinite(torch.as_tensor(float(fitted.trainer.callback_metrics.get("train/loss_step", 0.0))))


def test_fit_with_no_config_is_the_default_run(cli: ModuleType, in_tmp: Path) -> None:
    fitted = cli.build_cli(["fit", *FEW_STEPS, *SMALL_GRATINGS])
    assert type(fitted.model).__name__ == "Classifier"
    assert type(fitted.datamodule).__name__ == "GratingsDataModule"
    assert fitted.trainer.global_step == 2
    assert list(Path("runs/default").glob("*/checkpoints/last.ckpt"))  # a run of the default experiment
