"""A module whose optimizer steps where Lightning does not count it: found in the first batches, said in one line.

With manual optimization, Lightning counts a step when the module calls ``step()`` on the optimizer that
``self.optimizers()`` returns. Code that steps another object (SAM's ``base_optimizer.step()`` inside its
``second_step``, an optimizer built in ``__init__``) trains, but ``trainer.global_step`` stays 0: every line says
step 0, ``max_steps``, ``every_n_train_steps`` and step schedules never come, and a stop signal waited for the
epoch's end, where the kit's safe points are optimizer steps (issue 33). ``OutsideSteps`` watches the first
``WATCHED`` batches of a manual-optimization module: weights that changed while ``global_step`` did not are such a
step. It says so once, and from then on every batch end is a safe point for ``preemption.Preemption`` (each batch
of such a module is whole: its own steps are done when it returns).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_info

WATCHED = 3
"""Batches of a manual-optimization module watched after fit starts (or resumes); none of an automatic one."""


class OutsideSteps(Callback):
    """Finds optimizer steps Lightning does not count (see the module); ``found`` tells the safe points."""

    def __init__(self) -> None:
        self.found = False  # this run's module steps outside Lightning: every batch end is a safe point
        self._left = 0  # batches still to watch
        self._before: torch.Tensor | None = None  # the weights' sums as the batch started
        self._step = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.found, self._left = False, 0 if pl_module.automatic_optimization else WATCHED

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        if self._left:
            self._step = trainer.global_step
            self._before = _fingerprint(pl_module)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: object, batch: object, batch_idx: int
    ) -> None:
        if not self._left:
            return
        self._left -= 1
        if trainer.global_step != self._step:
            self._left = 0  # its steps go through Lightning's optimizer: counted
        elif self._before is not None and not torch.equal(_fingerprint(pl_module), self._before):
            self.found, self._left = True, 0
            rank_zero_info(
                f"model: {type(pl_module).__name__} changed its weights in a batch without a step Lightning counts"
                " (an optimizer's step() called on another object than self.optimizers() gives, e.g. SAM's"
                " base_optimizer.step()): global_step stays 0, so max_steps, every_n_train_steps and step schedules"
                " never come; a stop signal acts after the current batch. Call step() on the optimizer from"
                " self.optimizers() to count its steps"
            )
        self._before = None


def _fingerprint(pl_module: pl.LightningModule) -> torch.Tensor:
    """The sum of each trained weight tensor: a step changes them (a copy of the weights could double the memory)."""
    with torch.no_grad():
        sums = [p.detach().sum(dtype=torch.float64) for p in pl_module.parameters() if p.requires_grad]
    return torch.stack(sums) if sums else torch.zeros(0)
