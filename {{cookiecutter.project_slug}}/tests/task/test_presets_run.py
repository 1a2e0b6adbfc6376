"""Every preset runs on its own, as its header says (`<pkg> fit -c configs/<group>/<preset>.yaml`), for a few steps;
the logger presets also stacked, as theirs says.

test_configs.py proves each one parses and instantiates; this runs it. Small data and two steps: the point is
that nothing in a preset depends on another file than configs/default.yaml, which every command loads first.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from runkit.testing.support import needs_extras
from support import CONFIGS

TRAINING_PRESETS = sorted(
    str(path.relative_to(CONFIGS).with_suffix(""))
    for path in CONFIGS.rglob("*.yaml")
    if path.parent != CONFIGS and path.parent.name not in {"predict", "search", "data"}
)
SKIP = {  # distributed/fsdp needs CUDA GPUs: marked `gpu`
    "example/compile": "compiles for ~25 s cold on a CPU: test_compile.py fits it (stacked on the transformer)",
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
    assert {"debug/tiny", "example/transformer", "precision/bf16", "training/accumulate"} <= set(TRAINING_PRESETS)


@pytest.mark.parametrize(
    "preset", [pytest.param(p, marks=pytest.mark.gpu) if p == "distributed/fsdp" else p for p in TRAINING_PRESETS]
)
def test_preset_alone_fits(cli: ModuleType, in_tmp: Path, preset: str) -> None:
    if preset == "example/compile":
        pytest.skip(SKIP[preset])
    needs_extras(preset)
    fitted = cli.build_cli(["fit", f"--config={CONFIGS / preset}.yaml", *FEW_STEPS, *SMALL_GRATINGS])
    assert fitted.trainer.global_step >= 1
    assert torch.isfinite(torch.as_tensor(float(fitted.trainer.callback_metrics.get("train/loss_step", 0.0))))


def test_fit_with_no_config_is_the_default_run(cli: ModuleType, in_tmp: Path) -> None:
    fitted = cli.build_cli(["fit", *FEW_STEPS, *SMALL_GRATINGS])
    assert type(fitted.model).__name__ == "Classifier"
    assert type(fitted.datamodule).__name__ == "GratingsDataModule"
    assert fitted.trainer.global_step == 2
    assert list(Path("runs/default").glob("*/checkpoints/last.ckpt"))  # a run of the default experiment


LOGGERS = ("logger/tensorboard", "logger/csv", "logger/mlflow", "logger/wandb")


@pytest.fixture
def _w_and_b_offline_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's W&B offline, and what W&B leaves in this process's environment gone afterwards."""
    for name in ("WANDB_MODE", "WANDB_SERVICE", "WANDB_API_KEY", "MLFLOW_TRACKING_URI"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.mark.usefixtures("_w_and_b_offline_here")
def test_logger_presets_stack(cli: ModuleType, in_tmp: Path) -> None:
    needs_extras(*LOGGERS)
    presets = [f"--config={CONFIGS / name}.yaml" for name in LOGGERS]
    fitted = cli.build_cli(["fit", *presets, *FEW_STEPS, *SMALL_GRATINGS])
    run = Path(fitted.trainer.default_root_dir)
    kinds = ["TensorBoardLogger", "CSVLogger", "MLFlowLogger", "WandbLogger"]
    assert [
        next(k for k in kinds if k in {c.__name__ for c in type(x).__mro__}) for x in fitted.trainer.loggers
    ] == kinds
    # Each tracker wrote into the run folder (MLflow's local store beside the runs), and nowhere else.
    assert list(run.glob("events.out.tfevents.*"))
    assert "val/acc" in (run / "metrics.csv").read_text().splitlines()[0]
    assert len(list(run.glob("wandb/offline-run-*"))) == 1
    trackers = yaml.safe_load((run / "provenance.yaml").read_text())["trackers"]
    assert trackers["mlflow"]["tracking_uri"] == f"file:{Path('runs/mlruns').resolve()}"
    assert (Path("runs/mlruns") / trackers["mlflow"]["experiment_id"] / trackers["mlflow"]["run_id"]).is_dir()
    assert {path.name for path in Path().iterdir()} == {"runs"}
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
