"""How many worker processes a DataLoader may start: at most ``max(32, 4 x the usable CPU cores)``.

``num_workers: 1000`` on a 2-core machine started 1000 processes, each a Python with its own copy of the dataset:
no step came in 300 s, and nothing said why. More workers than cores is right for a loader that waits on I/O (files
on a network disk, decoding), so the bound is generous: 4 per core this process may run on, and never below 32. It
applies to every loader the task returns, checked as its ``*_dataloader`` hook returns it, before any worker starts
(``ExactResume`` wraps the hooks: ``safety/resume.py``); the task's code is not changed.
"""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import CombinedLoader

from ..bad_input import BadInputError

PER_CORE = 4
"""Worker processes per usable core a loader may start (for loaders that mostly wait on I/O)."""
AT_LEAST = 32
"""The bound on a machine with few cores."""


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity: a SLURM job's or a container's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def most_workers(cores: int) -> int:
    """The most worker processes one loader may start on ``cores`` usable cores."""
    return max(AT_LEAST, PER_CORE * cores)


def check_workers(source: object, hook: str, loaders: Any) -> None:
    """Refuses a loader among what ``source.<hook>()`` returned that would start more workers than ``most_workers``."""
    cores = usable_cores()
    bound = most_workers(cores)
    for loader in (loaders if isinstance(loaders, CombinedLoader) else CombinedLoader(loaders)).flattened:
        workers = getattr(loader, "num_workers", 0)
        if isinstance(workers, int) and workers > bound:
            key = "data" if isinstance(source, pl.LightningDataModule) else "model"
            raise BadInputError(
                f"{key}: {type(source).__name__}.{hook}() gives a DataLoader num_workers={workers}: more than {bound}"
                f" ({PER_CORE} per usable CPU core, {cores} here, and at least {AT_LEAST}) worker processes, each a"
                f" Python process with its own copy of the dataset; give at most {bound}"
            )
