"""The optimizer and its schedule for any LightningModule, in one line of ``configure_optimizers``.

A module takes Lightning's ``OptimizerCallable`` and ``LRSchedulerCallable`` as constructor arguments (so a
config names any torch optimizer and scheduler by class path) and returns
``configure_optimization(self, optimizer, scheduler, ...)``. What it does that the callables alone do not:

- a schedule that declares ``total_steps`` (``WarmupCosine``, ``OneCycleLR``) gets the run's length, by keyword,
  from ``trainer.estimated_stepping_batches`` (accumulation, devices and ``max_epochs``/``max_steps`` counted),
  unless the config gave one; the others (``StepLR``, ``ReduceLROnPlateau``) are built exactly as named;
- ``interval`` (``step`` or ``epoch``; unset: ``epoch`` for ``ReduceLROnPlateau``, else ``step``) and the metric a
  plateau schedule reads (``monitor``) come from the config;
- ``check_optimization`` builds both once on a stand-in parameter when the model is built: a negative LR is
  refused as bad input (one line, exit 2) instead of inside ``fit``, after the data is set up.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import ReduceLROnPlateau

from .compiled import with_fast_step

RUN_LENGTH = "total_steps"
"""The keyword a schedule declares to be given the run's length in optimizer steps."""


def configure_optimization(
    module: pl.LightningModule,
    optimizer: OptimizerCallable,
    scheduler: LRSchedulerCallable | None = None,
    interval: Literal["step", "epoch"] | None = None,
    monitor: str = "val/loss",
    fast_step: bool = False,
) -> Any:
    """What ``module.configure_optimizers`` returns: the optimizer over its parameters and the schedule, if any.

    Args:
        module: The LightningModule (attached to its Trainer).
        optimizer: Builds the optimizer from the parameters.
        scheduler: Builds the schedule from the optimizer (and ``total_steps``, if it declares it); ``None``: none.
        interval: How often the schedule steps; ``None``: ``epoch`` for ``ReduceLROnPlateau``, else ``step``.
        monitor: The logged metric a ``ReduceLROnPlateau`` reads.
        fast_step: Rebuild the optimizer with a one-kernel step (``fused``; ``foreach`` where Lightning refuses
            fused: clipping under mixed precision, lightning#21435).
    """
    built = optimizer(module.parameters())
    if fast_step:
        trainer = module.trainer
        clips_mixed = bool(trainer.gradient_clip_val) and str(trainer.precision).endswith("-mixed")
        built = with_fast_step(built, fused=not clips_mixed)
    if scheduler is None:
        return built
    # Read only for a schedule that takes it: it loads the train loader early (lightning#20550).
    schedule = build_schedule(scheduler, built, lambda: module.trainer.estimated_stepping_batches)
    plateau = isinstance(schedule, ReduceLROnPlateau)
    config: dict[str, Any] = {"scheduler": schedule, "interval": interval or ("epoch" if plateau else "step")}
    if plateau:
        config["monitor"] = monitor
    return {"optimizer": built, "lr_scheduler": config}


def build_schedule(scheduler: LRSchedulerCallable, optimizer: Optimizer, run_length: Callable[[], float]) -> Any:
    """``scheduler(optimizer)``, with ``total_steps=run_length()`` by keyword when it declares the run's length."""
    if not takes_run_length(scheduler):
        return scheduler(optimizer)
    total_steps = run_length()
    steps = int(total_steps) if math.isfinite(total_steps) else total_steps  # inf: the schedule says what it needs
    return scheduler(optimizer, **{RUN_LENGTH: steps})  # type: ignore[call-arg]


def takes_run_length(scheduler: Callable[..., Any]) -> bool:
    """Whether ``scheduler`` declares ``total_steps`` and its config left it unset (``null``)."""
    given = scheduler.keywords if isinstance(scheduler, functools.partial) else {}
    if given.get(RUN_LENGTH) is not None:
        return False
    try:
        parameters = inspect.signature(built_class(scheduler) or scheduler).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return RUN_LENGTH in parameters


def built_class(scheduler: Callable[..., Any]) -> type | None:
    """The class a scheduler callable builds: itself, or the class in jsonargparse's ``functools.partial``.

    jsonargparse gives a config's ``class_path`` as ``partial(<its caller>, <instantiator>, <class>, **init_args)``
    (4.x): the class is looked for among the partial's function and arguments (``tests/kit/test_optimization.py``).
    """
    if isinstance(scheduler, type):
        return scheduler
    if isinstance(scheduler, functools.partial):
        return next((part for part in (scheduler.func, *scheduler.args) if isinstance(part, type)), None)
    return None


def check_optimization(optimizer: OptimizerCallable, scheduler: LRSchedulerCallable | None = None) -> None:
    """Builds the optimizer and the schedule once, on a stand-in parameter, and raises what they refuse.

    Call it in ``__init__``: ``configure_optimizers`` runs only inside ``fit``, after the data is set up. The run's
    length is not known yet; an ample one checks every other argument of a schedule that takes it.
    """
    try:
        probe = optimizer([nn.Parameter(torch.zeros(1))])
    except ValueError as error:
        raise ValueError(f"optimizer: {error}") from None
    if scheduler is None:
        return
    try:
        build_schedule(scheduler, probe, lambda: 2**31)
    except ValueError as error:
        raise ValueError(f"scheduler: {error}") from None
