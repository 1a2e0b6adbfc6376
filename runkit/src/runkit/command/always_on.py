"""What every run gets, whatever its config says: the safeguards, the monitors and the atomic checkpoint writer.

Registered by the CLI in code (``cli.py``), so a config that sets ``trainer.callbacks:`` or ``trainer.plugins:``
keeps them. Their settings have their own keys (``best_checkpoint``, ``last_checkpoint``) or follow the
Trainer's switches (``logger``, ``enable_model_summary``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.plugins.io import CheckpointIO

from ..bad_input import BadInputError, SetupPhase
from ..lightning_internals import saves_sharded
from ..observe.memory import MemoryBudget
from ..observe.monitoring import EpochMonitor, GradNormMonitor, ModelSummary, ThroughputMonitor
from ..observe.progress import EpochLine
from ..parts.matmul_precision import unless_configured
from ..safety.checkpoint_io import AtomicCheckpointIO
from ..safety.compiled_shapes import DynamicBatchDim
from ..safety.elastic import DataLayout
from ..safety.eval_mode import EvalModeAtStart
from ..safety.nonfinite import StopOnNonFinite
from ..safety.outside_steps import OutsideSteps
from ..safety.plateau_resume import PlateauResume
from ..safety.preemption import Preemption
from ..safety.resume import ExactResume
from ..store import RunPath, StorePath
from ..trackers.tracked_run import TrackedRun
from .task_checks import StartCheck
from .worker_count import check_workers

if TYPE_CHECKING:
    from ..run.session import RunSession


def kit_callbacks(trainer_config: dict[str, Any], saved: DataLayout | None = None) -> list[pl.Callback]:
    """The callbacks every run gets, whatever ``trainer.callbacks`` holds: safeguards, then observability.

    Settings come from their own keys (``best_checkpoint``, ``last_checkpoint``) and the Trainer's switches;
    ``saved``: the data layout of the checkpoint a fit starts from (exact resume rebuilds the train loader to it).
    """
    callbacks: list[pl.Callback] = [SetupPhase(), StartCheck(), ExactResume(check_workers, saved), PlateauResume()]
    outside = OutsideSteps()  # before Preemption: a module stepping outside Lightning stops at batch ends
    callbacks += [outside, Preemption(outside)]
    callbacks.append(StopOnNonFinite())
    callbacks.append(EvalModeAtStart())  # a from_pretrained model trains in eval mode unless it is said
    callbacks.append(DynamicBatchDim())  # a compiled network with a short last batch resumes exactly
    callbacks.append(TrackedRun())  # checkpoints in the run folder whatever the logger; loggers flushed with them
    callbacks += [GradNormMonitor(), EpochMonitor(), EpochLine(), ThroughputMonitor(), MemoryBudget()]
    callbacks += unless_configured(as_list(trainer_config.get("callbacks")))
    if trainer_config.get("logger") is not False:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    if trainer_config.get("enable_model_summary") is not False:
        callbacks.append(ModelSummary(max_depth=3))
    return callbacks


def with_atomic_checkpoint_io(plugins: Any) -> list[Any]:
    """``trainer.plugins`` plus ``AtomicCheckpointIO``, unless the config chose another checkpoint plugin."""
    configured = as_list(plugins)
    if any(isinstance(plugin, CheckpointIO) for plugin in configured):
        return configured
    return [*configured, AtomicCheckpointIO()]


def with_sharded_checkpoints(trainer: pl.Trainer, run_dir: RunPath | None) -> None:
    """Has a strategy that saves sharded checkpoints (FSDP's ``sharded``, ``ModelParallelStrategy``) save, check and
    delete them through the kit (``safety/sharded_checkpoints.py``, imported only then); refuses a run in a store."""
    if not saves_sharded(trainer.strategy):
        return
    if isinstance(run_dir, StorePath):
        raise BadInputError(
            f"trainer.strategy: {type(trainer.strategy).__name__} saves sharded checkpoints, which need a local or"
            f" shared file system, and the run folder is in a store ({run_dir}); run it under a folder, or save full"
            " state dicts"
        )
    from ..safety.sharded_checkpoints import take_over

    take_over(trainer)


def as_list(value: Any) -> list[Any]:
    """``value`` as a list: a config entry may hold nothing, one item or several."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def trainer_arguments(
    config: dict[str, Any], session: RunSession, logger: Any, callbacks: list[pl.Callback]
) -> dict[str, Any]:
    """What the kit gives the Trainer beside the config's ``trainer`` keys: the run folder, the loggers placed in it,
    the atomic checkpoint writer, and the callbacks every run gets (``always_on.py``) after the config's own."""
    kit = kit_callbacks({**config, "logger": logger}, session.layout)
    arguments = {
        "default_root_dir": str(session.directory),  # everything the Trainer writes by itself goes there too
        "logger": logger,
        "plugins": with_atomic_checkpoint_io(config.get("plugins")),
        "callbacks": [*as_list(config.get("callbacks")), *kit, *callbacks],
    }
    if config.get("enable_progress_bar") is None:  # null (the default): a bar on a terminal, none in CI or pipes
        arguments["enable_progress_bar"] = interactive()
    return arguments


def interactive() -> bool:
    """Whether a person watches: stderr (where progress bars go) is a terminal and ``CI`` is not set."""
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() in {"", "0", "false"}
