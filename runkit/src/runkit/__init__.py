"""runkit: run folders, exact resume, stop signals and safeguards for PyTorch Lightning projects driven by
LightningCLI. It works with any LightningModule and LightningDataModule; what it reads from a task is listed in
``protocol.py``. A project calls it from its console script (``main(args, Project(...))``) and names its classes in
configs (``runkit.WarmupCosine``).

Folders by concern: ``command/`` (the CLI, runs, provenance, checks before a command), ``safety/`` (checkpoints,
exact resume, preemption, non-finite stops), ``observe/`` (what a run shows), ``tools/`` (finders, schedule preview,
export, prediction), ``parts/`` (what configs name, and what any module can use: ``configure_optimization``),
``search/`` (Optuna), ``trackers/`` (TensorBoard, CSV, MLflow, W&B: any logger writes where the run is),
``testing/`` (what a project's tests use: faults to inject, probes, helpers to run the command line).

The names below are the public surface: the files behind them can move without breaking a config. They load on
first use: importing runkit costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC = {
    "Project": "project",
    "configs_near": "project",
    "main": "entry",
    "build_cli": "entry",
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
    "Project",
    "ScheduleCallable",
    "TensorFiles",
    "WarmupCosine",
    "atomic_save",
    "build_cli",
    "check_optimization",
    "check_samples",
    "compile_in_place",
    "configs_near",
    "configure_optimization",
    "keep_step_kinds",
    "logging_step",
    "main",
    "save_plain_hyperparameters",
    "with_fast_step",
]

if TYPE_CHECKING:
    from .entry import build_cli, main
    from .observe.profiling import Profiler
    from .parts.compiled import compile_in_place, keep_step_kinds, with_fast_step
    from .parts.early_stopping import EarlyStoppingOnBest
    from .parts.hyperparameters import save_plain_hyperparameters
    from .parts.matmul_precision import MatmulPrecision
    from .parts.optimization import check_optimization, configure_optimization
    from .parts.schedules import ScheduleCallable, WarmupCosine
    from .parts.step_logging import logging_step
    from .project import Project, configs_near
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
