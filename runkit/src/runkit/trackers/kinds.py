"""The extension point for trackers: a kind of Lightning logger the kit knows how to place in a run.

A tracker is one ``Tracker``: the Lightning logger class a config names (``base``) and how to build it to write
where the run is (``place``). ``register`` adds one; ``placement.in_run`` takes, for each configured logger, the
newest registered tracker whose ``base`` the class is a subclass of, and keeps any other logger as it was built.
The kit registers TensorBoard, CSV, MLflow and W&B (``placement.py``); a team's tracker is one file like them::

    class MyTracker:
        base = MyLightningLogger
        def place(self, args, run):  # args: the config's init_args; run: the folder, record, ids, purge step
            return MyRunLogger(run.directory, ...)

    register(MyTracker())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lightning.pytorch.loggers import Logger

if TYPE_CHECKING:
    from ..run.provenance import RunRecord


@dataclass
class Placement:
    """Where a logger of a ``fit`` writes, and what it continues."""

    directory: Path  # the run folder
    record: RunRecord | None  # the run's provenance (None: a `fit` called in code), where tracker ids are kept
    known: dict[str, Any] = field(default_factory=dict)  # this tracker's ids recorded by earlier sessions
    purge_step: int | None = None  # the first step a resumed session logs (None: a new run)


class Tracker(Protocol):
    """One kind of logger the kit places in a run (see the module)."""

    base: type[Logger]
    """The Lightning logger class (and its subclasses) this tracker places."""
    name: str
    """Its key under ``trackers:`` in ``provenance.yaml``."""

    def place(self, args: dict[str, Any], run: Placement) -> Logger:
        """The logger, built from the config's ``args`` to write where ``run`` is."""
        ...


TRACKERS: list[Tracker] = []
"""The trackers registered with ``register``, newest first: they come before the kit's own."""
BUILT_IN: list[Tracker] = []
"""The kit's own (TensorBoard, CSV, MLflow, W&B: ``placement.py``), after every registered one."""


def register(tracker: Tracker) -> Tracker:
    """Adds ``tracker`` ahead of those registered before and of the kit's own (a tracker for a subclass of a logger
    the kit places wins over the kit's); returns it."""
    TRACKERS.insert(0, tracker)
    return tracker


def tracker_for(cls: type | None) -> Tracker | None:
    """The tracker that places loggers of ``cls``, or ``None`` (the logger is used as it was built)."""
    if cls is None:
        return None
    return next((tracker for tracker in [*TRACKERS, *BUILT_IN] if issubclass(cls, tracker.base)), None)
