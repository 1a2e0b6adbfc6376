"""What exact resume costs an ordinary DataModule: the kit's rebuilt train loader against the user's loader as written.

The example's ``GratingsDataModule`` is ordinary user code: a plain ``DataLoader(shuffle=True)``, augmentation
drawn from torch's global RNG in ``__getitem__``. ``fit`` rebuilds that loader (``kit/safety/resumable_data.py``): a
resumable sampler, the global RNGs seeded once per batch, and without workers their states saved and restored
around the fetch. The baseline is the same ``fit`` with ``ExactResume`` removed, so the loader is used as written.
The seam's own work per batch is also timed alone, against a whole step.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from common import TINY_PRESETS, Row, StepTimer, best_median_ms, build, fit_once, judge, median_ratios, steady
from torch.utils.data import DataLoader, Dataset


def seam_fit(workdir: Path, steps: int, resumable: bool, workers: int, presets: tuple[str, ...]) -> StepTimer:
    """A CPU ``fit`` of ``steps`` optimizer steps, with the kit's resumable train loader or the user's own."""
    without = None if resumable else importlib.import_module("runkit.safety.resume").ExactResume
    built, timer, _ = fit_once(
        workdir, steps, f"--data.init_args.num_workers={workers}", presets=presets, without=without
    )
    loader_class = type(built.trainer.train_dataloader).__name__
    assert (loader_class == "ResumableLoader") == resumable, loader_class
    return timer


class _Nothing(Dataset):
    """A dataset whose samples cost nothing to fetch: what is left of a batch fetch is the seam's own work."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> None:
        return None


def seam_alone_ms(batches: int, batch_size: int, repeats: int) -> list[float]:
    """Milliseconds per batch of the seam's own work in the main process: key unpacking, seeding, RNG save/restore.

    Timed on a dataset whose samples cost nothing, through the seam and directly; one value per round.
    """
    dataset = _Nothing(batch_size * 8)
    make_resumable = importlib.import_module("runkit.safety.resumable_data").make_resumable
    loader, _ = make_resumable(DataLoader(dataset, batch_size, shuffle=True), seed=0)
    keys = list(loader.sampler)[:batch_size]  # (seed, epoch, index) of one batch
    indices = [index for _, _, index in keys]
    differences = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            [dataset[index] for index in indices]
        direct = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(batches):
            loader.dataset.__getitems__(keys)
        differences.append(time.perf_counter() - start - direct)
    return [1e3 * difference / batches for difference in differences]


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps, warmup = (6, 2) if tiny else (60, 10)
    presets = TINY_PRESETS if tiny else ()
    datamodule = build(workdir, presets=presets).datamodule
    rows, step_ms = [], 0.0
    for workers in dict.fromkeys((0, datamodule.resolved_num_workers())):
        durations: dict[bool, list[list[float]]] = {True: [], False: []}
        for repeat in range(repeats):
            for resumable in (True, False) if repeat % 2 == 0 else (False, True):  # alternate: drift hits both
                timer = seam_fit(workdir, steps, resumable, workers, presets)
                durations[resumable].append(steady(timer.ends, timer.start, warmup))
        baseline, candidate = best_median_ms(durations[False]), best_median_ms(durations[True])
        ratios = median_ratios(durations[True], durations[False])
        step_ms = step_ms or baseline
        rows.append(
            Row(
                f"Data seam, steady-state step, {workers} worker(s)",
                "user's DataLoader as written",
                baseline,
                "kit's resumable loader",
                candidate,
                "ms",
                goal="<= 1.01x",
                met=judge(ratios, 1.01),
                repeats=ratios,
                note=f"the example's ordinary DataModule; best of {repeats} runs' median of {steps - warmup} steps",
            )
        )
    batch_size = datamodule.batch_size
    alone = seam_alone_ms(20 if tiny else 5_000, batch_size, repeats)
    alone_ms, shares = min(alone), [value / step_ms for value in alone]
    rows.append(
        Row(
            "Data seam, its own work per batch (main process: seeding, RNG save and restore)",
            "a training step (no workers)",
            step_ms,
            "the seam alone",
            alone_ms,
            "ms",
            goal="<= 0.01x",
            met=judge(shares, 0.01),
            repeats=shares,
            note=f"batches of {batch_size} from a dataset whose samples cost nothing, through the seam minus directly;"
            " with workers the seam runs in them, and without the RNG save and restore",
        )
    )
    return rows
