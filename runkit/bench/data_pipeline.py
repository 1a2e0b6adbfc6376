"""Data pipeline: the default DataLoader (``num_workers`` as configured) against batches already in memory.

Both sides run the project's ``fit`` on the same model; the in-memory side gets the very same batches,
produced before training starts, so whatever the step costs beyond that is the loading pipeline's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from common import TINY_PRESETS, Row, best_median_ms, build, judge, median_ratios, steady, timed_fit


class Batches:
    """An iterable of ready batches (a bare list would be read by Lightning as several dataloaders)."""

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class Preloaded(pl.LightningDataModule):
    """The first ``steps`` training batches of ``source``, materialised in memory; validation unchanged."""

    def __init__(self, source: pl.LightningDataModule, steps: int) -> None:
        super().__init__()
        self.source, self.steps = source, steps
        for name in ("num_classes", "in_channels", "image_size", "batch_size"):  # the project's data contract
            setattr(self, name, getattr(source, name))
        self.batches = Batches([])

    def setup(self, stage: str) -> None:
        self.source.setup(stage)
        self.batches = Batches(list(itertools.islice(self.source.train_dataloader(), self.steps)))

    def train_dataloader(self) -> Batches:
        return self.batches

    def val_dataloader(self) -> Any:
        return self.source.val_dataloader()


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps = 6 if tiny else 60
    presets = TINY_PRESETS if tiny else ()
    built = build(workdir, presets=presets)
    workers = built.datamodule.resolved_num_workers()
    rows, threads = [], torch.get_num_threads()
    # Second pass: compute on one thread fewer, so a core is free for the worker, as on a machine whose
    # cores are not all busy with compute (or whose compute runs on a GPU).
    for compute_threads in dict.fromkeys((threads, max(1, threads - 1))):
        torch.set_num_threads(compute_threads)
        durations: dict[bool, list[list[float]]] = {False: [], True: []}
        for repeat in range(repeats):
            for preload in (False, True) if repeat % 2 == 0 else (True, False):
                data = (lambda source: Preloaded(source, steps)) if preload else None
                _, timer = timed_fit(workdir, steps, presets=presets, data=data)
                durations[preload].append(steady(timer.ends, timer.start, warmup=steps // 5))
        baseline, candidate = best_median_ms(durations[True]), best_median_ms(durations[False])
        ratios = median_ratios(durations[False], durations[True])
        rows.append(
            Row(
                f"Data pipeline, steady-state step, compute on {compute_threads} of {threads} threads",
                "batches in memory",
                baseline,
                f"DataLoader, {workers} worker(s)",
                candidate,
                "ms",
                goal="<= 1.02x",
                met=judge(ratios, 1.02),
                note="ratio per pair of alternated runs (median steps); values: the best run's median",
                repeats=ratios,
            )
        )
    torch.set_num_threads(threads)
    return rows
