"""How the trackers' tests set up runs: the logger presets stacked into one config, the extras they need, and an
environment that says nothing about trackers but what a test sets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support import CONFIGS, submodule

placement = submodule("trackers.placement")
EXPERIMENT = Path("runs/fixture")
LIMITS = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]  # 2 steps
NEEDS = {
    "mlflow": ("mlflow", "the MLflow tests need the project's `mlflow` extra"),
    "wandb": ("wandb", "the W&B tests need the project's `wandb` extra"),
    "optuna": ("optuna", "the search needs the project's `search` extra (Optuna)"),
}
TRACKER_ENVIRONMENT = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_TOKEN",
    "WANDB_API_KEY",
    "WANDB_MODE",
    "WANDB_SERVICE",
    "WANDB_BASE_URL",
    "WANDB_IDENTITY_TOKEN_FILE",
    "WANDB_DISABLED",
    placement.PARENT_RUN_ENV,
    placement.PARENT_EXPERIMENT_ENV,
)


def needs(*names: str) -> None:
    """Skips, with the reason, when a tracker's extra is not installed."""
    for name in names:
        pytest.importorskip(NEEDS[name][0], reason=NEEDS[name][1])


def clear_tracker_environment(patch: pytest.MonkeyPatch) -> None:
    """Whatever the machine's environment says about trackers, the tests say it themselves; undone with ``patch``,
    and so is a value a W&B run sets meanwhile."""
    for name in TRACKER_ENVIRONMENT:
        patch.setenv(name, "")  # recorded: undoing it removes whatever is there then
        patch.delenv(name)
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):  # the kit moves a URL's credentials here
        patch.setenv(name, "")
    patch.setenv("WANDB_SILENT", "true")


def forget_w_and_b(patch: pytest.MonkeyPatch) -> None:
    """What a W&B run leaves in this process's environment, gone now and when ``patch`` is undone: Lightning's
    offline WandbLogger sets ``WANDB_MODE=dryrun`` (every later W&B run of the process is offline), W&B its
    service's address (a process launched with it would use this process's service)."""
    for name in ("WANDB_MODE", "WANDB_SERVICE"):
        patch.setenv(name, "")
        patch.delenv(name)


def tracker_flags(*names: str, file: str = "trackers.yaml", **init_args: dict[str, Any]) -> str:
    """A config stacking the presets ``configs/logger/<name>.yaml``, with ``init_args`` overrides per name."""
    entries = []
    for name in names:
        (entry,) = yaml.safe_load((CONFIGS / "logger" / f"{name}.yaml").read_text())["trainer"]["logger+"]
        entry["init_args"].update(init_args.get(name, {}))
        entries.append(entry)
    Path(file).write_text(yaml.safe_dump({"trainer": {"logger": entries}}))
    return f"--config={Path(file).resolve()}"


def the_run(root: Path = Path()) -> Path:
    """The one run of the fixture experiment under ``root``."""
    (run,) = [path for path in (root / EXPERIMENT).iterdir() if path.is_dir()]
    return run


def record(run: Path) -> dict[str, Any]:
    """The run's ``provenance.yaml``."""
    return yaml.safe_load((run / "provenance.yaml").read_text())
