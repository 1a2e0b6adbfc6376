"""Lightning's CSV logger writing ``<run>/metrics.csv``, continuing the file across resumes."""

from __future__ import annotations

import csv
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only


class RunCSVLogger(CSVLogger):
    """``<run>/metrics.csv`` (and ``hparams.yaml``); a resume keeps the rows before ``purge_step`` and goes on.

    Lightning's deletes an existing ``metrics.csv`` when its folder holds anything: a resume would lose the rows.
    """

    def __init__(
        self, directory: Path, purge_step: int | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100
    ) -> None:
        file = directory / "metrics.csv"
        self._kept = _rows_before(file, purge_step) if purge_step is not None and file.is_file() else None
        super().__init__(
            save_dir=str(directory.parent.parent),
            name=directory.parent.name,
            version=directory.name,
            prefix=prefix,
            flush_logs_every_n_steps=flush_logs_every_n_steps,
        )
        self.logged_step = -1

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        with warnings.catch_warnings():  # the run folder holds config.yaml: not a sign of an old experiment
            warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
            writer = super().experiment
        if self._kept is not None:  # Lightning deleted the file: write back what the resumed run keeps
            kept, self._kept = self._kept, None
            for step, row in kept:
                writer.log_metrics(row, step)
            writer.save()
        return writer

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:  # type: ignore[override]
        super().log_metrics(metrics, step)
        if step is not None:
            self.logged_step = max(self.logged_step, int(step))


def _rows_before(file: Path, purge_step: int) -> list[tuple[int, dict[str, float | int]]]:
    with open(file, newline="") as handle:
        rows = list(csv.DictReader(handle))
    kept = []
    for row in rows:
        step = int(row.pop("step"))
        if step < purge_step:
            kept.append((step, {key: _number(value) for key, value in row.items() if value != ""}))
    return kept


def _number(text: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        return float(text)
