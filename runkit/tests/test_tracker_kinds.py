"""A tracker of a team's own is one class and one ``register`` call (``runkit.trackers.kinds``): its logger, named in
``trainer.logger``, is built by it to write in the run folder, like the four the kit registers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.loggers import CSVLogger, Logger
from support import submodule

from runkit.testing.support import run_dir_flags

kinds = submodule("trackers.kinds")
submodule("trackers.placement")  # where the kit's own trackers are


class TeamLogger(CSVLogger):
    """A team's logger class, as a config names it (``trainer.logger``)."""


class TeamTracker:
    base, name = TeamLogger, "team"

    def __init__(self) -> None:
        self.placed: list[Path] = []

    def place(self, args: dict[str, Any], run: Any) -> Logger:
        self.placed.append(run.directory)
        return CSVLogger(run.directory, name="", version="", prefix=args.get("prefix", ""))


def test_a_registered_tracker_places_its_logger_in_the_run(
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(kinds, "TRACKERS", list(kinds.TRACKERS))
    tracker = kinds.register(TeamTracker())
    run = tmp_path / "runs" / "fixture" / "team"
    logger = f"--trainer.logger={{'class_path': '{__name__}.TeamLogger', 'init_args': {{'save_dir': 'elsewhere'}}}}"
    fitted = run_cli("fit", *run_dir_flags(run), logger, "--trainer.max_epochs=1", "--trainer.limit_train_batches=4")
    assert tracker.placed == [run]
    assert [type(logger) for logger in fitted.trainer.loggers] == [CSVLogger]
    assert (run / "metrics.csv").is_file()
    assert not Path("elsewhere").exists()


def test_a_logger_no_tracker_places_is_used_as_built() -> None:
    assert kinds.tracker_for(Logger) is None
    assert kinds.tracker_for(TeamLogger).name == "csv"  # a subclass of one the kit places: the kit's CSV tracker
