"""Gradient accumulation: k micro-batches of b make the same optimizer step as one batch of k*b.

Exact for networks without batch statistics (the transformer, the ConvNet with GroupNorm); BatchNorm
normalises each micro-batch on its own, so with it the step differs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from runkit.testing import probes
from support import SMALL_RUN
from torch import Tensor

MICRO_BATCH, ACCUMULATE = 8, 4


def one_step(run_cli: Callable[..., object], presets: tuple[str, ...], batch_size: int, accumulate: int) -> tuple:
    """Initial and updated parameters after one optimizer step of plain SGD, taken by the Trainer."""
    built = run_cli(
        "fit",
        f"--data.init_args.batch_size={batch_size}",
        f"--trainer.accumulate_grad_batches={accumulate}",
        "--trainer.max_steps=1",
        "--trainer.limit_val_batches=0",
        # SGD, not Adam: Adam's first step is ~lr * sign(grad) and would hide a wrongly scaled gradient.
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.init_args.lr=0.5",
        "--model.scheduler=null",
        "--model.network.init_args.dropout=0.0",
        # Fixed samples: augmentation is seeded per batch (kit/safety/resumable_data.py), so batches of 8 and of 32
        # would draw different noise for the same sample.
        "--data.init_args.augment=false",
        "--trainer.callbacks+=runkit.testing.probes.InitialWeights",
        presets=(*SMALL_RUN, *presets),
    )
    assert built.trainer.global_step == 1
    assert built.trainer.fit_loop.epoch_loop.batch_progress.total.completed == accumulate
    initial = probes.find(built.trainer, probes.InitialWeights).parameters
    return initial, {name: p.detach().clone() for name, p in built.model.named_parameters()}


def max_difference(a: dict[str, Tensor], b: dict[str, Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[name] - b[name]).abs().max()) for name in a)


@pytest.mark.parametrize("presets", [("example/transformer",), ("example/groupnorm",)], ids="+".join)
def test_accumulated_micro_batches_equal_one_large_batch(
    run_cli: Callable[..., object], presets: tuple[str, ...]
) -> None:
    initial, accumulated = one_step(run_cli, presets, MICRO_BATCH, ACCUMULATE)
    initial_again, large = one_step(run_cli, presets, MICRO_BATCH * ACCUMULATE, 1)
    assert max_difference(initial, initial_again) == 0.0  # same seed, same starting point
    assert max_difference(initial, large) > 1e-3  # the step moved the weights
    for name, value in large.items():
        torch.testing.assert_close(accumulated[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_batchnorm_breaks_the_equivalence(run_cli: Callable[..., object]) -> None:
    _, accumulated = one_step(run_cli, (), MICRO_BATCH, ACCUMULATE)  # default.yaml's ConvNet: BatchNorm
    _, large = one_step(run_cli, (), MICRO_BATCH * ACCUMULATE, 1)
    assert max_difference(accumulated, large) > 1e-3
