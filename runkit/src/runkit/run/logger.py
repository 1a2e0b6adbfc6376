"""TensorBoard events in the run folder, one continuous curve across the run's sessions (see ``trackers.py``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger


def _after_earlier_events(directory: Path) -> None:
    """Waits (at most a second) until this session's events file sorts after the run's earlier ones.

    TensorBoard reads a folder's events files in name order, and a name starts with the second it was created
    (``events.out.tfevents.<seconds>.<host>.<pid>``): a resume started within the same second as the session
    it continues would be read first, and its curve put before the one it continues.
    """
    names = [path.name.split(".") for path in directory.glob("events.out.tfevents.*")]
    seconds = [int(name[3]) for name in names if name[3].isdigit()]
    wait = max(seconds, default=0) + 1 - time.time()
    if 0 < wait <= 1:
        time.sleep(wait)


class RunLogger(TensorBoardLogger):
    """TensorBoard events in the run folder; remembers the last step it logged, so a resume can purge what follows.

    A resumed run writes into the same folder with ``purge_step`` (TensorBoard drops the events of the
    interrupted session from that step on), so each run shows one continuous curve.
    """

    def __init__(self, directory: Path, purge_step: int | None = None) -> None:
        kwargs: dict[str, Any] = {} if purge_step is None else {"purge_step": purge_step}
        if purge_step is not None:
            _after_earlier_events(directory)
        super().__init__(
            save_dir=str(directory.parent.parent),
            name=directory.parent.name,
            version=directory.name,
            default_hp_metric=False,
            **kwargs,
        )
        self.logged_step = -1

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        super().log_metrics(metrics, step)
        if step is not None:
            self.logged_step = max(self.logged_step, int(step))
