"""Warmup + cosine: the closed form at the points that matter, and the scheduler that follows it."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch
from support import submodule


@pytest.fixture(scope="module")
def schedules() -> ModuleType:
    return submodule("parts.schedules")


def make(schedules: ModuleType, total: int = 100, **kwargs: float) -> object:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return schedules.WarmupCosine(optimizer, total, **kwargs)


def test_closed_form_key_points(schedules: ModuleType) -> None:
    f = schedules.warmup_cosine_factor
    kw = {"total_steps": 100, "warmup_steps": 10, "start_factor": 0.1, "min_lr_ratio": 0.0, "restarts": 0}
    assert f(0, **kw) == pytest.approx(0.1)  # first step
    assert f(9, **kw) == pytest.approx(0.1 + 0.9 * 9 / 10)  # last warmup step
    assert f(10, **kw) == pytest.approx(1.0)  # peak
    assert f(55, **kw) == pytest.approx(0.5)  # halfway through the decay
    assert f(99, **kw) == pytest.approx(0.5 * (1 + math.cos(math.pi * 89 / 90)))  # final step
    assert f(100, **kw) == pytest.approx(0.0)


def test_restarts_return_to_peak(schedules: ModuleType) -> None:
    kw = {"total_steps": 110, "warmup_steps": 10, "start_factor": 0.1, "min_lr_ratio": 0.2, "restarts": 1}
    assert schedules.warmup_cosine_factor(60, **kw) == pytest.approx(1.0)
    assert schedules.warmup_cosine_factor(59, **kw) == pytest.approx(0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * 0.98)))


def test_scheduler_follows_closed_form(schedules: ModuleType) -> None:
    scheduler = make(schedules, total=50, warmup_fraction=0.2, start_factor=0.01, min_lr_ratio=0.1)
    assert scheduler.warmup_steps == 10
    for step in range(50):
        assert scheduler.get_last_lr()[0] == pytest.approx(scheduler.factor(step))
        scheduler.optimizer.step()
        scheduler.step()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"total": math.inf}, "finite run length"),
        ({"warmup_fraction": 1.5}, "warmup_fraction must be in"),
        ({"warmup_steps": 500}, "warmup_steps must be in"),
        ({"start_factor": 0.0}, "start_factor must be in"),
        ({"restarts": -1}, "restarts must be >= 0"),
    ],
)
def test_bad_arguments_name_the_problem(schedules: ModuleType, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make(schedules, **kwargs)
