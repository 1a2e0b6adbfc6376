"""Run directories: ``<trainer.default_root_dir>/<experiment>/<name>/`` holds a run's events, config and checkpoints."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger


class RunDirectory:
    """Where a run writes: ``<trainer.default_root_dir>/<experiment>/<name>``."""

    def __init__(self, experiment: str = "default", name: str | None = None) -> None:
        """Names the run.

        Args:
            experiment: The group of runs this one belongs to (a folder under ``trainer.default_root_dir``).
            name: The run's own folder; ``null``: the experiment folder itself.
        """
        self.experiment = experiment
        self.name = name

    def path(self, root: str | Path) -> Path:
        """The run directory under ``root``."""
        return Path(root) / self.experiment / (self.name or "")

    def logger(self, root: str | Path) -> TensorBoardLogger:
        """The default logger: TensorBoard events in the run directory."""
        return TensorBoardLogger(
            save_dir=str(root), name=self.experiment, version=self.name or "", default_hp_metric=False
        )
