"""Trainer overhead: the project's ``fit`` against a hand-written loop doing the same work.

Same configs (network, data, optimizer, schedule, clipping, batch size, seed), fp32, eager, on the CPU.
The ``fit`` side keeps every default callback and the TensorBoard logger; the loop does what a careful
hand-written loop does: the same sanity validation before training, the same metric objects (the
module's torchmetrics), the grad norm, and the same scalars to TensorBoard every ``log_every_n_steps``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import Row, StepTimer, best_median_ms, build, project, steady, timed_fit
from lightning.pytorch.utilities.seed import isolate_rng
from torch.utils.tensorboard import SummaryWriter


def loop_run(run_dir: Path, steps: int, *flags: str, presets: tuple[str, ...]) -> tuple[float, StepTimer]:
    """Wall time of the hand-written loop, and a step record in the same form."""
    start = time.perf_counter()
    built = build(run_dir, f"--trainer.max_steps={steps}", *flags, presets=presets)  # the same seeded objects
    model, data, trainer = built.model, built.datamodule, built.trainer
    network, label_smoothing = model.network, model.label_smoothing
    accuracy, mean_loss = model.metrics["train_acc"], model.metrics["train_loss"]  # the module's metric objects
    data.setup("fit")
    optimizer = model.optimizer_factory(network.parameters())
    scheduler = model.scheduler_factory(optimizer, steps) if model.scheduler_factory else None
    writer = SummaryWriter(str(run_dir))
    record = StepTimer()

    # Lightning's sanity check: two validation batches before training, in an isolated RNG.
    network.eval()
    with torch.inference_mode(), isolate_rng():
        for _, (images, labels) in zip(range(trainer.num_sanity_val_steps), data.val_dataloader(), strict=False):
            logits = network(images)
            model.metrics["val_acc"](logits, labels)
            model.metrics["val_loss"](F.cross_entropy(logits, labels), weight=len(labels))
    network.train()
    # The batches `fit` trains on: the user's loader rebuilt by the kit (its cost is data_seam.py's row).
    make_resumable = project("kit.safety.resumable_data").make_resumable
    loader, _ = make_resumable(data.train_dataloader(), int(os.environ["PL_GLOBAL_SEED"]))
    if steps > len(loader):
        raise ValueError(f"steps={steps} is more than one epoch ({len(loader)} batches); this loop runs one")
    record.start = time.perf_counter()
    for step, (images, labels) in zip(range(steps), loader, strict=False):
        logits = network(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
        optimizer.zero_grad()
        loss.backward()
        grads = [p.grad for p in network.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.get_total_norm(grads)
        if trainer.gradient_clip_val:
            torch.nn.utils.clip_grads_with_norm_(network.parameters(), trainer.gradient_clip_val, grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        batch_accuracy = accuracy(logits.detach(), labels)
        batch_loss = mean_loss(loss.detach(), weight=len(labels))
        if step % trainer.log_every_n_steps == 0:
            scalars = {"train/loss": batch_loss, "train/acc": batch_accuracy, "train/grad_norm": grad_norm}
            for tag, value in scalars.items():
                writer.add_scalar(tag, float(value), step)
            writer.add_scalar("lr", optimizer.param_groups[0]["lr"], step)
        record.ends.append(time.perf_counter())
        record.losses.append(float(loss.detach()))
    writer.close()
    return time.perf_counter() - start, record


# A network and batch so small that a step is almost all loop: the difference is the trainer's own cost.
NEAR_EMPTY = ("--model.network.init_args.widths=[2]", "--data.init_args.batch_size=8")


def compare(workdir: Path, steps: int, warmup: int, repeats: int, *flags: str, presets: tuple[str, ...]) -> dict:
    """Alternates ``fit`` and the loop ``repeats`` times; step ms (best run median) and fixed cost per side."""
    runs: dict[str, list[tuple[float, StepTimer]]] = {"fit": [], "loop": []}
    for repeat in range(repeats):
        order = ("fit", "loop") if repeat % 2 == 0 else ("loop", "fit")  # alternate, so drift hits both sides
        for side in order:
            if side == "fit":
                runs[side].append(timed_fit(workdir, steps, *flags, presets=presets))
            else:
                run_dir = Path(tempfile.mkdtemp(prefix="loop-", dir=workdir))
                runs[side].append(loop_run(run_dir, steps, *flags, presets=presets))
    step_ms, fixed_s = {}, {}
    for side, results in runs.items():
        step_ms[side] = best_median_ms([steady(timer.ends, timer.start, warmup) for _, timer in results])
        # Everything but steady-state steps: setup and teardown, plus what the first steps took beyond the median.
        fixed = [total - sum(steady(t.ends, t.start, warmup)) - warmup * step_ms[side] / 1e3 for total, t in results]
        fixed_s[side] = sorted(fixed)[len(fixed) // 2]
    fit_losses, loop_losses = runs["fit"][0][1].losses, runs["loop"][0][1].losses
    max_diff = max(abs(a - b) for a, b in zip(fit_losses, loop_losses, strict=True))
    agree = "identical" if max_diff == 0 else f"max |diff| {max_diff:.2e}"
    return {"step_ms": step_ms, "fixed_s": fixed_s, "agree": agree}


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps, warmup = (6, 2) if tiny else (60, 10)
    presets = ("debug/tiny",) if tiny else ()
    flags = ("--trainer.limit_train_batches=1.0",) if tiny else ()  # the loop below covers one epoch only
    default = compare(workdir, steps, warmup, repeats, *flags, presets=presets)
    empty = compare(workdir, steps, warmup, repeats, *flags, *NEAR_EMPTY, presets=presets)
    step_ms, fixed_s = default["step_ms"], default["fixed_s"]
    ratio = step_ms["fit"] / step_ms["loop"]
    own_ms = empty["step_ms"]["fit"] - empty["step_ms"]["loop"]
    return [
        Row(
            "Trainer overhead, steady-state step",
            "hand loop",
            step_ms["loop"],
            "project fit",
            step_ms["fit"],
            "ms",
            goal="<= 1.03x",
            met=ratio <= 1.03,
            note=f"best of {repeats} runs' median of {steps - warmup} steps; losses over {steps} steps: "
            f"{default['agree']}; the trainer's own cost, near-empty step: {own_ms:+.2f} ms",
        ),
        Row(
            "Trainer overhead, near-empty step (2-channel ConvNet, batch 8)",
            "hand loop",
            empty["step_ms"]["loop"],
            "project fit",
            empty["step_ms"]["fit"],
            "ms",
            note=f"the difference is the trainer's own per-step cost; losses: {empty['agree']}",
        ),
        Row(
            "Fixed cost per run (setup, sanity check, summary, budget, checkpoint)",
            "hand loop",
            fixed_s["loop"],
            "project fit",
            fixed_s["fit"],
            "s",
            note="wall time minus the steady-state steps, the first steps counted at the median",
        ),
    ]
