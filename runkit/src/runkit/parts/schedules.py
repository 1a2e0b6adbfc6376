"""Learning-rate schedules that know the run's length: linear warmup, then cosine decay.

It declares ``total_steps``, so ``configure_optimization`` (``optimization.py``) gives it the run's length by keyword:
``trainer.estimated_stepping_batches``, with accumulation, device count and ``max_epochs``/``max_steps`` accounted
for. It is stepped once per optimizer step.
"""

from __future__ import annotations

import math

from lightning.pytorch.cli import LRSchedulerCallable
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

ScheduleCallable = LRSchedulerCallable
"""Lightning's type of a schedule in a config (kept under the kit's earlier name for configs and modules using it)."""


def warmup_cosine_factor(
    step: int, total_steps: int, warmup_steps: int, start_factor: float, min_lr_ratio: float, restarts: int
) -> float:
    """The LR multiplier in effect for optimizer step ``step`` (0-based), in closed form.

    Warmup rises linearly from ``start_factor`` (step 0) to 1 (step ``warmup_steps``); the rest of the
    run is split into ``restarts + 1`` equal cosine cycles from 1 down to ``min_lr_ratio``.
    """
    if step < warmup_steps:
        return start_factor + (1.0 - start_factor) * step / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    cycle_progress = (progress * (restarts + 1)) % 1.0 if progress < 1.0 else 1.0
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * cycle_progress))


class WarmupCosine(LRScheduler):
    """Linear warmup from ``start_factor * lr`` to ``lr``, then cosine decay to ``min_lr_ratio * lr``."""

    def __init__(
        self,
        optimizer: Optimizer,
        total_steps: int | None = None,
        warmup_fraction: float = 0.05,
        warmup_steps: int | None = None,
        start_factor: float = 0.01,
        min_lr_ratio: float = 0.0,
        restarts: int = 0,
    ) -> None:
        """Builds the schedule.

        Args:
            optimizer: The optimizer whose learning rates are scheduled.
            total_steps: Optimizer steps in the whole run; ``null``: the run's, given by ``configure_optimization``.
            warmup_fraction: Warmup length as a fraction of ``total_steps`` (used if ``warmup_steps`` is null).
            warmup_steps: Warmup length in optimizer steps; overrides ``warmup_fraction``.
            start_factor: LR multiplier at the first step of warmup.
            min_lr_ratio: LR multiplier at the end of each cosine cycle.
            restarts: Warm restarts: the decay is split into ``restarts + 1`` cycles that each start at full LR.
        """
        if total_steps is None or not math.isfinite(total_steps) or total_steps < 1:
            raise ValueError(
                f"WarmupCosine needs a finite run length, got total_steps={total_steps}:"
                " set trainer.max_steps or trainer.max_epochs (a module passes it: kit.configure_optimization)"
            )
        if not 0.0 <= warmup_fraction <= 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1], got {warmup_fraction}")
        if warmup_steps is not None and not 0 <= warmup_steps <= total_steps:
            raise ValueError(f"warmup_steps must be in [0, total_steps={total_steps}], got {warmup_steps}")
        if not 0.0 < start_factor <= 1.0:
            raise ValueError(f"start_factor must be in (0, 1], got {start_factor}")
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
        if restarts < 0:
            raise ValueError(f"restarts must be >= 0, got {restarts}")
        self.total_steps = int(total_steps)
        self.warmup_steps = round(warmup_fraction * total_steps) if warmup_steps is None else warmup_steps
        self.start_factor, self.min_lr_ratio, self.restarts = start_factor, min_lr_ratio, restarts
        super().__init__(optimizer)

    def factor(self, step: int) -> float:
        """The LR multiplier for optimizer step ``step``."""
        return warmup_cosine_factor(
            step, self.total_steps, self.warmup_steps, self.start_factor, self.min_lr_ratio, self.restarts
        )

    def get_lr(self) -> list[float]:
        factor = self.factor(self.last_epoch)  # `last_epoch` counts scheduler steps, here optimizer steps
        return [base_lr * factor for base_lr in self.base_lrs]
