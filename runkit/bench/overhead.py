"""Trainer overhead: the project's ``fit``, bare Lightning and a hand-written loop, step by step in alternation.

Three comparisons, each two sides taking turns one step at a time in one process (``alternate.py``):

- the default run: the project's ``fit`` against a hand-written loop with the same losses (same configs, seed,
  batches through the kit's resumable loader, fp32, eager, CPU);
- a near-empty step (2-channel ConvNet, batch 8), where a step is almost all loop: the kit's cost over bare
  Lightning (the same module and data under a plain ``Trainer``), and bare Lightning's over the hand loop
  (reading the DataModule's own loader, as bare Lightning does), in ms per step.

The loop does what a careful hand-written loop does: the same sanity validation before training, the module's
metric objects, and, every ``log_every_n_steps``, the grad norm and the same scalars to TensorBoard. A fixed
cost row compares whole short runs, alternated.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from alternate import Baton, Paced, Side, alternate, paired
from common import TINY_PRESETS, Row, build, judge, quartiles
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.seed import isolate_rng
from torch.utils.tensorboard import SummaryWriter

# The near-empty steps run on one torch thread and are timed in that thread's CPU time: the time other processes
# take from it is not counted (on a busy 2-core VM, wall time varies 3x from step to step).
CPU = time.thread_time

# A network and batch so small that a step is almost all loop: the difference is the trainer's own cost. No
# loader worker: the batches are fetched in the step, on both sides, and no third process competes for the cores.
NEAR_EMPTY = ("--model.network.init_args.widths=[2]", "--data.init_args.batch_size=8", "--data.init_args.num_workers=0")


def hand_loop(side: Side, built: Any, run_dir: Path, steps: int, resumable: bool) -> None:
    """The hand-written loop over ``built``'s seeded objects: one ``side`` step per optimizer step."""
    model, data, trainer = built.model, built.datamodule, built.trainer
    network, label_smoothing, period = model.network, model.label_smoothing, trainer.log_every_n_steps
    accuracy, mean_loss = model.metrics["train_acc"], model.metrics["train_loss"]  # the module's metric objects
    data.setup("fit")
    optimizer = model.optimizer_factory(network.parameters())
    build_schedule = importlib.import_module(
        "runkit.parts.optimization"
    ).build_schedule  # the run length by keyword, as in fit
    scheduler = build_schedule(model.scheduler_factory, optimizer, lambda: steps) if model.scheduler_factory else None
    writer = SummaryWriter(str(run_dir))

    # Lightning's sanity check: two validation batches before training, in an isolated RNG.
    network.eval()
    with torch.inference_mode(), isolate_rng():
        for _, (images, labels) in zip(range(trainer.num_sanity_val_steps), data.val_dataloader(), strict=False):
            logits = network(images)
            model.metrics["val_acc"](logits, labels)
            model.metrics["val_loss"](F.cross_entropy(logits, labels), weight=len(labels))
    network.train()
    if resumable:  # the batches the project's `fit` trains on: the user's loader rebuilt by the kit
        loader, _ = importlib.import_module("runkit.safety.resumable_data").make_resumable(
            data.train_dataloader(), int(os.environ["PL_GLOBAL_SEED"])
        )
    else:
        loader = data.train_dataloader()
    if steps > len(loader):
        raise ValueError(f"steps={steps} is more than one epoch ({len(loader)} batches); this loop runs one")
    side.start()
    for step, (images, labels) in zip(range(steps), loader, strict=False):
        logits = network(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        logging = (step + 1) % period == 0  # Lightning's logging steps
        grad_norm = None
        if logging or trainer.gradient_clip_val:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in network.parameters() if p.grad is not None])
        if trainer.gradient_clip_val:
            torch.nn.utils.clip_grads_with_norm_(network.parameters(), trainer.gradient_clip_val, grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        batch_accuracy = accuracy(logits.detach(), labels)
        batch_loss = mean_loss(loss.detach(), weight=len(labels))
        if logging:
            scalars = {"train/loss": batch_loss, "train/acc": batch_accuracy, "train/grad_norm": grad_norm}
            for tag, value in scalars.items():
                writer.add_scalar(tag, float(value), step)
            writer.add_scalar("lr", optimizer.param_groups[0]["lr"], step)
        side.step_done(loss.detach())
    writer.close()


def project_fit(side: Side, built: Any) -> None:
    """The project's ``fit`` of ``built``: every kit callback, the kit's loader and logger."""
    built.trainer.callbacks.append(Paced(side))
    built.trainer.fit(built.model, built.datamodule)


def bare_fit(side: Side, built: Any, run_dir: Path) -> None:
    """The same module and data under a plain ``Trainer`` with the configured training settings."""
    configured = built.trainer
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=configured.max_steps,
        precision=configured.precision,
        log_every_n_steps=configured.log_every_n_steps,
        gradient_clip_val=configured.gradient_clip_val,
        gradient_clip_algorithm=configured.gradient_clip_algorithm,
        logger=TensorBoardLogger(run_dir),
        enable_progress_bar=False,
        default_root_dir=run_dir,
        callbacks=[Paced(side)],
    )
    with contextlib.redirect_stdout(sys.stderr):  # its model summary table, which the kit prints to stderr
        trainer.fit(built.model, built.datamodule)


def fresh(workdir: Path, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir)) / "bench" / "run"


def compare(
    workdir: Path,
    sides: tuple[str, str],
    steps: int,
    warmup: int,
    repeat_periods: int,
    *flags: str,
    presets: tuple[str, ...],
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Alternates two of ``fit`` (the project's), ``bare`` and ``loop``; the first runs in the main thread."""
    flags = (f"--trainer.max_steps={steps}", "--trainer.accelerator=cpu", *flags)
    runners: list[Callable[[Side], None]] = []
    period = 1
    for name in sides:
        run_dir = fresh(workdir, f"{name}-")
        built = build(run_dir, *flags, presets=presets)  # the same seeded objects on both sides
        period = built.trainer.log_every_n_steps
        if name == "fit":
            runners.append(partial(project_fit, built=built))
        elif name == "bare":
            runners.append(partial(bare_fit, built=built, run_dir=run_dir))
        else:
            runners.append(partial(hand_loop, built=built, run_dir=run_dir, steps=steps, resumable="fit" in sides))
    first, second = alternate(runners[0], runners[1], names=sides, clock=clock)
    result = paired(first, second, warmup, period, repeat_periods)
    losses = list(zip(first.losses, second.losses, strict=False))
    max_diff = max(abs(a - b) for a, b in losses)
    agree = "identical" if max_diff == 0 else f"max |diff| {max_diff:.2e}"
    return {"paired": result, "agree": f"losses over {len(losses)} steps: {agree}", "period": period}


def solo(name: str) -> Side:
    """A side that never waits: for a run timed alone."""
    baton = Baton(name, "nobody")
    baton.finish("nobody")
    return Side(baton, name)


def fixed_costs(workdir: Path, steps: int, repeats: int, presets: tuple[str, ...]) -> dict[str, list[float]]:
    """Per side, whole short runs' wall time minus their steps (s), alternated ``repeats`` times."""
    costs: dict[str, list[float]] = {"fit": [], "loop": []}
    flags = (f"--trainer.max_steps={steps}", "--trainer.accelerator=cpu")
    for repeat in range(repeats):
        for name in ("fit", "loop") if repeat % 2 == 0 else ("loop", "fit"):
            start, side, run_dir = time.perf_counter(), solo(name), fresh(workdir, f"{name}-fixed-")
            built = build(run_dir, *flags, presets=presets)
            if name == "fit":
                project_fit(side, built)
            else:
                hand_loop(side, built, run_dir, steps, resumable=True)
            costs[name].append(time.perf_counter() - start - sum(side.durations))
    return costs


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    presets = TINY_PRESETS if tiny else ()
    # tiny: its preset logs every step; a repeat is 2 steps. Full: 3 logging periods (30 steps) a repeat.
    repeat_periods, warmup = (2, 2) if tiny else (3, 10)
    tiny_flags = ("--trainer.limit_train_batches=1.0",) if tiny else ()  # the loop covers one epoch only
    n_default, n_empty = (2, 2) if tiny else (2 * repeats, 4 * repeats)
    period = 1 if tiny else 10
    # The default run's repeats are twice as long: its steps are ~15x the near-empty ones and vary more.
    default_periods = 2 * repeat_periods
    steps = warmup + n_default * default_periods * period
    # Enough samples for one epoch of `steps` batches: validation and epoch ends stay out of the steps.
    size = (f"--data.init_args.train_size={steps * (32 if tiny else 128)}",)  # example/small_data's batches are 32
    flags = (*tiny_flags, *size)
    default = compare(workdir, ("fit", "loop"), steps, warmup, default_periods, *flags, presets=presets)
    empty_steps = warmup + n_empty * repeat_periods * period
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # every near-empty op in the stepping thread, where CPU time counts it
    empty = {
        pair: compare(
            workdir, pair, empty_steps, warmup, repeat_periods, *tiny_flags, *NEAR_EMPTY, presets=presets, clock=CPU
        )
        for pair in (("fit", "bare"), ("bare", "loop"))
    }
    torch.set_num_threads(threads)
    fixed = fixed_costs(workdir, 5 if tiny else 20, 1 if tiny else repeats, presets)
    rows = []
    result = default["paired"]
    rows.append(
        Row(
            "Trainer overhead: default run's step, project fit vs hand loop",
            "hand loop",
            result.median_ms("baseline"),
            "project fit",
            result.median_ms("candidate"),
            "ms",
            goal="<= 1.03x",
            met=judge(result.ratios, 1.03),
            note=f"alternated step by step; {len(result.ratios)} repeats of {default_periods * period} steps after "
            f"{warmup}; {default['agree']}; fit minus loop: {statistics.median(result.differences_ms):+.2f} ms",
            repeats=result.ratios,
        )
    )
    kit = empty[("fit", "bare")]["paired"]
    rows.append(
        Row(
            "Kit's cost per step over bare Lightning, near-empty step (2-channel ConvNet, batch 8)",
            "bare Lightning",
            kit.median_ms("baseline"),
            "project fit",
            kit.median_ms("candidate"),
            "ms",
            goal="<= +0.3 ms",
            met=judge(kit.differences_ms, 0.3),
            note="CPU time of the stepping thread (1 torch thread); every kit callback, the kit's loader and logger; "
            f"{len(kit.ratios)} repeats of "
            f"{repeat_periods * period} steps, alternated step by step; ratio {statistics.median(kit.ratios):.3f}x",
            repeats=kit.differences_ms,
            difference="ms",
        )
    )
    lightning = empty[("bare", "loop")]["paired"]
    rows.append(
        Row(
            "Lightning's cost per step over the hand loop, near-empty step",
            "hand loop",
            lightning.median_ms("baseline"),
            "bare Lightning",
            lightning.median_ms("candidate"),
            "ms",
            note="CPU time of the stepping thread (1 torch thread); both read the DataModule's own loader; "
            f"{empty[('bare', 'loop')]['agree']}; ratio "
            f"{statistics.median(lightning.ratios):.3f}x",
            repeats=lightning.differences_ms,
            difference="ms",
        )
    )
    difference = [f - loop for f, loop in zip(fixed["fit"], fixed["loop"], strict=True)]
    rows.append(
        Row(
            "Fixed cost per run (setup, sanity check, summary, budget, checkpoint)",
            "hand loop",
            quartiles(fixed["loop"])[1],
            "project fit",
            quartiles(fixed["fit"])[1],
            "s",
            note=f"whole runs of {5 if tiny else 20} steps, alternated; wall time minus the steps",
            repeats=difference,
            difference="s",
        )
    )
    return rows
