"""Seeding: with configs/deterministic.yaml, one seed gives one loss sequence; another seed another."""

from __future__ import annotations

from collections.abc import Callable

import torch
from runkit.testing import probes
from runkit.testing.support import run_dir_flags
from support import SMALL_RUN


def losses(run_cli: Callable[..., object], seed: int, name: str) -> list[float]:
    flags = [f"--seed_everything={seed}", "--trainer.max_epochs=1", *run_dir_flags(f"runs/{name}")]
    built = run_cli("fit", *flags, presets=(*SMALL_RUN, "training/deterministic"))
    assert torch.are_deterministic_algorithms_enabled()
    assert built.trainer.global_step == 4
    return [value for _, value in probes.read_scalars(f"runs/{name}")["train/loss_step"]]


def test_same_seed_same_losses_other_seed_other_losses(run_cli: Callable[..., object]) -> None:
    first, again, other = losses(run_cli, 7, "first"), losses(run_cli, 7, "again"), losses(run_cli, 8, "other")
    assert len(first) == 4
    assert first == again  # bit for bit
    assert all(a != b for a, b in zip(first, other, strict=True))
