"""What exact resume costs an ordinary DataModule: the kit's rebuilt train loader against the user's loader as written.

The example's ``GratingsDataModule`` is ordinary user code: a plain ``DataLoader(shuffle=True)``, augmentation
drawn from torch's global RNG in ``__getitem__``. ``fit`` rebuilds that loader (``kit/resumable_data.py``): a
resumable sampler, the global RNGs seeded once per batch, and without workers their states saved and restored
around the fetch. The baseline is the same ``fit`` with ``ExactResume`` removed, so the loader is used as written.
The seam's own work per batch is also timed alone, against a whole step.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from common import Row, StepTimer, best_median_ms, build, project, steady


def seam_fit(workdir: Path, steps: int, resumable: bool, workers: int, presets: tuple[str, ...]) -> StepTimer:
    """A CPU ``fit`` of ``steps`` optimizer steps, with the kit's resumable train loader or the user's own."""
    run_dir = Path(tempfile.mkdtemp(prefix="fit-", dir=workdir))
    flags = (f"--trainer.max_steps={steps}", "--trainer.accelerator=cpu", f"--data.init_args.num_workers={workers}")
    built = build(run_dir, *flags, presets=presets)
    if not resumable:
        exact = project("kit.resume").ExactResume
        built.trainer.callbacks[:] = [c for c in built.trainer.callbacks if not isinstance(c, exact)]
    timer = StepTimer()
    built.trainer.callbacks.append(timer)
    built.trainer.fit(built.model, built.datamodule)
    loader_class = type(built.trainer.train_dataloader).__name__
    assert (loader_class == "ResumableLoader") == resumable, loader_class
    return timer


def seam_alone_ms(batches: int, presets: tuple[str, ...], workdir: Path) -> float:
    """Milliseconds per batch the seam adds in the main process: a batch fetched through it minus fetched directly."""
    built = build(workdir, "--data.init_args.num_workers=0", presets=presets)
    datamodule = built.datamodule
    datamodule.prepare_data()
    datamodule.setup("fit")
    loader, _ = project("kit.resumable_data").make_resumable(datamodule.train_dataloader(), seed=0)
    seeded, dataset = loader.dataset, loader.dataset.dataset
    keys = list(loader.sampler)[: datamodule.batch_size]  # (seed, epoch, index) of one batch
    indices = [index for _, _, index in keys]
    timings: dict[str, float] = {}
    for _ in range(2):  # the second round is timed: caches warm on both sides
        start = time.perf_counter()
        for _ in range(batches):
            [dataset[index] for index in indices]
        timings["direct"] = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(batches):
            seeded.__getitems__(keys)
        timings["seam"] = time.perf_counter() - start
    return 1e3 * (timings["seam"] - timings["direct"]) / batches


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps, warmup = (6, 2) if tiny else (60, 10)
    presets = ("debug/tiny",) if tiny else ()
    default_workers = build(workdir, presets=presets).datamodule.resolved_num_workers()
    rows, step_ms = [], 0.0
    for workers in dict.fromkeys((0, default_workers)):
        durations: dict[bool, list[list[float]]] = {True: [], False: []}
        for repeat in range(repeats):
            for resumable in (True, False) if repeat % 2 == 0 else (False, True):  # alternate: drift hits both
                timer = seam_fit(workdir, steps, resumable, workers, presets)
                durations[resumable].append(steady(timer.ends, timer.start, warmup))
        baseline, candidate = best_median_ms(durations[False]), best_median_ms(durations[True])
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
                met=candidate / baseline <= 1.01,
                note=f"the example's ordinary DataModule; best of {repeats} runs' median of {steps - warmup} steps",
            )
        )
    alone_ms = seam_alone_ms(20 if tiny else 2_000, presets, workdir)
    rows.append(
        Row(
            "Data seam, its own work per batch (main process: seeding, RNG save and restore)",
            "a training step (no workers)",
            step_ms,
            "the seam alone",
            alone_ms,
            "ms",
            goal="<= 0.01x",
            met=alone_ms <= 0.01 * step_ms,
            note="fetching a batch through the seam minus fetching it directly; with workers this runs in them",
        )
    )
    return rows
