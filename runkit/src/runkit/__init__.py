"""The kit: the command line, checkpoints, exact resume, preemption, safeguards, schedules, observability,
prediction and export. It works with any LightningModule and LightningDataModule and never imports from
``task``; what it reads from a task is listed in ``protocol.py``. Updated from the template (``cruft update``).

Folders by concern: ``command/`` (the CLI, runs, provenance, checks before a command), ``safety/`` (checkpoints,
exact resume, preemption, non-finite stops), ``observe/`` (what a run shows), ``tools/`` (finders, schedule preview,
export, prediction), ``parts/`` (what configs name, and what any module can use: ``configure_optimization``),
``search/`` (Optuna), ``trackers/`` (TensorBoard, CSV, MLflow, W&B: any logger writes where the run is).

The names below are the kit's public surface: configs and tasks name them here (``<package>.kit.WarmupCosine``), so
the files behind them can move without breaking a config. They load on first use: importing the kit costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "BestCheckpoint": "safety.checkpoints",
    "WarmupCosine": "parts.schedules",
    "ScheduleCallable": "parts.schedules",
    "configure_optimization": "parts.optimization",
    "check_optimization": "parts.optimization",
    "save_plain_hyperparameters": "parts.hyperparameters",
    "compile_in_place": "parts.compiled",
    "with_fast_step": "parts.compiled",
    "keep_step_kinds": "parts.compiled",
    "logging_step": "parts.step_logging",
    "EarlyStoppingOnBest": "parts.early_stopping",
    "MatmulPrecision": "parts.matmul_precision",
    "Profiler": "observe.profiling",
    "PredictionWriter": "tools.prediction",
    "TensorFiles": "tools.prediction",
    "InvalidDataError": "safety.data_checks",
    "check_samples": "safety.data_checks",
    "atomic_save": "safety.checkpoint_io",
}
__all__ = [
    "BestCheckpoint",
    "EarlyStoppingOnBest",
    "InvalidDataError",
    "MatmulPrecision",
    "PredictionWriter",
    "Profiler",
    "ScheduleCallable",
    "TensorFiles",
    "WarmupCosine",
    "atomic_save",
    "check_optimization",
    "check_samples",
    "compile_in_place",
    "configure_optimization",
    "keep_step_kinds",
    "logging_step",
    "save_plain_hyperparameters",
    "with_fast_step",
]

if TYPE_CHECKING:
    from .observe.profiling import Profiler
    from .parts.compiled import compile_in_place, keep_step_kinds, with_fast_step
    from .parts.early_stopping import EarlyStoppingOnBest
    from .parts.hyperparameters import save_plain_hyperparameters
    from .parts.matmul_precision import MatmulPrecision
    from .parts.optimization import check_optimization, configure_optimization
    from .parts.schedules import ScheduleCallable, WarmupCosine
    from .parts.step_logging import logging_step
    from .safety.checkpoint_io import atomic_save
    from .safety.checkpoints import BestCheckpoint
    from .safety.data_checks import InvalidDataError, check_samples
    from .tools.prediction import PredictionWriter, TensorFiles


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value  # loaded once
    return value
