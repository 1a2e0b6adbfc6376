"""The compiled variant of any module: its network compiled in place, its optimizer stepping in one kernel.

- ``compile_in_place(network)`` in ``configure_model``: ``nn.Module.compile`` keeps the state_dict keys (no
  ``_orig_mod.`` prefix), and compiling a part, not the LightningModule, keeps ``self.log`` working (lightning#21836).
- ``with_fast_step(optimizer)`` (``configure_optimization(..., fast_step=True)``): the same optimizer with a fused
  step; on a CPU PyTorch's default is a Python loop over the parameters.
- ``keep_step_kinds(trainer)`` in ``on_train_start``: a checkpoint's param groups carry the step kind of the run
  that wrote it, so eager and compiled runs resume from each other's checkpoints each with its own.
"""

from __future__ import annotations

import inspect

import lightning.pytorch as pl
from torch import nn
from torch.optim import Optimizer

STEP_KINDS = ("fused", "foreach")
"""Optimizer settings that choose how ``step`` runs (one kernel for all parameters, one per operation, a loop)."""


def compile_in_place(network: nn.Module) -> None:
    """Compiles ``network`` with ``torch.compile`` in place, once (``configure_model`` may run again)."""
    if getattr(network, "_compiled_call_impl", None) is None:
        network.compile()


def with_fast_step(optimizer: Optimizer, fused: bool = True) -> Optimizer:
    """``optimizer`` rebuilt with the same settings and a faster step: ``fused`` (one kernel), else ``foreach``.

    Unchanged when its class offers neither, when it is ``differentiable``, or when the config chose either.
    The state the step keeps is the same, so checkpoints load across the two.
    """
    defaults = optimizer.defaults
    if any(key not in defaults or defaults[key] is not None for key in STEP_KINDS) or defaults.get("differentiable"):
        return optimizer
    kind = {"fused": True} if fused else {"foreach": True}
    accepted = inspect.signature(type(optimizer)).parameters
    settings = {key: value for key, value in defaults.items() if key in accepted}
    return type(optimizer)([{**group, **kind} for group in optimizer.param_groups], **{**settings, **kind})


def keep_step_kinds(trainer: pl.Trainer) -> None:
    """Gives each optimizer's param groups back the step kind it was built with (after a checkpoint loaded)."""
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            group.update({key: optimizer.defaults[key] for key in STEP_KINDS if key in optimizer.defaults})
