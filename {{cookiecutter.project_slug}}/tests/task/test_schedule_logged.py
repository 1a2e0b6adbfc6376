"""Warmup + cosine as the Trainer runs it: the LR that LearningRateMonitor logs equals the closed form.

Under 2-process DDP the same check runs in test_ddp.py, on that file's shared run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from runkit.testing import probes

LR, START, MIN = 0.003, 0.01, 0.01  # default.yaml's lr and min_lr_ratio; WarmupCosine's default start_factor
WARMUP = 4


def expected_lr(step: int, total: int, peak: float = LR) -> float:
    """Warmup + cosine written out independently of schedules.py."""
    if step < WARMUP:
        return peak * (START + (1 - START) * step / WARMUP)
    return peak * (MIN + (1 - MIN) * 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / (total - WARMUP))))


def logged_lr(run_dir: Path | str, optimizer: str = "AdamW") -> dict[int, float]:
    """The LR logged at each optimizer step (logged once per micro-batch under accumulation: all equal)."""
    by_step: dict[int, list[float]] = {}
    for step, value in probes.read_scalars(run_dir)[f"lr-{optimizer}"]:
        by_step.setdefault(step, []).append(value)
    assert all(len(set(values)) == 1 for values in by_step.values()), by_step
    return {step: values[0] for step, values in by_step.items()}


def check_schedule(lr: dict[int, float], total: int, peak: float = LR) -> None:
    """The logged LR at every optimizer step, and at the points that matter spelled out."""
    assert sorted(lr) == list(range(total))
    for step, value in lr.items():
        assert value == pytest.approx(expected_lr(step, total, peak), rel=1e-6), f"step {step}"
    assert lr[0] == pytest.approx(peak * START)  # the first step
    assert lr[WARMUP - 1] == pytest.approx(peak * (START + (1 - START) * (WARMUP - 1) / WARMUP))  # last warmup step
    assert lr[WARMUP] == pytest.approx(peak)  # the peak
    assert lr[WARMUP + (total - WARMUP) // 2] == pytest.approx(peak * (1 + MIN) / 2)  # halfway through the decay
    assert peak * MIN < lr[total - 1] < lr[total - 2]  # the final step: still decaying, above the floor


def test_logged_lr_with_accumulation_and_max_epochs(run_cli: Callable[..., object]) -> None:
    # 16 batches of 8 per epoch, accumulated in pairs: 8 optimizer steps per epoch, 16 in 2 epochs.
    built = run_cli(
        "fit",
        "--data.init_args.batch_size=8",
        "--trainer.limit_train_batches=16",
        "--trainer.accumulate_grad_batches=2",
        f"--model.scheduler.init_args.warmup_steps={WARMUP}",
    )
    assert built.trainer.global_step == 16
    check_schedule(logged_lr(built.trainer.log_dir), total=16)


def test_logged_lr_with_max_steps(run_cli: Callable[..., object]) -> None:
    # max_steps sizes the schedule, whatever the epochs: 20 steps at 8 per epoch end mid-epoch.
    built = run_cli(
        "fit",
        "--trainer.max_epochs=-1",
        "--trainer.max_steps=20",
        "--trainer.limit_train_batches=8",
        f"--model.scheduler.init_args.warmup_steps={WARMUP}",
    )
    assert built.trainer.global_step == 20
    assert built.trainer.num_training_batches == 8  # so the run ended inside its third epoch
    check_schedule(logged_lr(built.trainer.log_dir), total=20)
