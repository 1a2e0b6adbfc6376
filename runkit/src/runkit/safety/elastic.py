"""Elastic resume: a run stopped on N processes continues on M, with the same samples at every step.

The order of a fit depends on the seed and the epoch only. Each epoch is one seeded permutation of the dataset, cut
into global batches of ``B`` samples, one per step; under ``W`` processes each takes ``B / W`` samples of every global
batch (``ResumableSampler`` shards like a ``DistributedSampler``: process ``r`` takes positions ``r, r + W, ...``,
which makes the ``k``-th batch of every process a share of the same ``B`` positions). So 2 processes with 8 samples
each and 1 process with 16 train on the same samples at every step, and a checkpoint's position (batches trained in
the epoch) means the same whatever the number of processes.

A run records ``B`` per train loader in its checkpoints (``DataLayout``) and keeps it on every fit from its checkpoints:
the loader a resumed run's ``train_dataloader`` returns is rebuilt with ``B / M`` samples per process, whatever batch
size it asks for (``--data.init_args.batch_size 7`` on a resume is not used, on any process count, and one line says so:
the saved position and the schedule count batches of ``B``). A global batch that ``M`` processes cannot share equally
is refused before anything is written (accumulating gradients instead would change what each optimizer step averages
over when batches are uneven, and the schedule).
The augmentation RNGs are seeded per sample from ``(seed, epoch, index)`` (``SeededDataset``): a sample gets the same
augmentation on any process. What cannot follow (a rank's own RNG in the training step, a loader the kit could not
rebuild, a dataset with a generator of its own) is named in one line at a resume on another number of processes, and
in the run's provenance (``elastic``).

Exact when the epoch's last global batch (``len(dataset) % B`` samples, unless the loader drops it) splits equally over
every process count used; otherwise that step pads with repeated samples, as ``DistributedSampler`` does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from .resumable_data import ResumableLoader, is_stateful

STATE_KEY = "ExactResume"  # the callback whose checkpoint state holds the layout (``resume.ExactResume``)


DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


@dataclass(frozen=True)
class DataLayout:
    """How a run's train data is laid out over its processes: what another process count needs to continue it."""

    global_batches: tuple[int | None, ...]  # samples per step of each train loader, over all processes (None: kept)
    processes: int  # the processes that trained the run when this was recorded
    per_sample: bool  # augmentation seeded per sample (elastic); checkpoints of runkit 0.1 seeded it per batch
    asked: tuple[int | None, ...] = ()  # the batch size each train loader asked for (its config's), before the kit's

    def state(self) -> dict[str, Any]:
        """What the checkpoint stores (numbers and lists: it loads with ``weights_only=True``)."""
        batches, asked = list(self.global_batches), list(self.asked)
        return {"global_batches": batches, "processes": self.processes, "per_sample": self.per_sample, "asked": asked}

    def per_process(self, processes: int) -> list[int | None]:
        """The batch size of each train loader on ``processes`` processes (checked by ``check_processes`` first)."""
        return [None if batch is None else batch // processes for batch in self.global_batches]


def saved_layout(checkpoint: dict[str, Any]) -> DataLayout | None:
    """The layout a checkpoint recorded; ``None`` for one this kit's ``fit`` did not write."""
    state = (checkpoint.get("callbacks") or {}).get(STATE_KEY)
    if not isinstance(state, dict) or "rng" not in state:
        return None
    data = state.get("data")
    if data is None:  # runkit 0.1: one RNG state per process, augmentation seeded per batch
        return DataLayout((), processes=len(state["rng"]), per_sample=False)
    asked = tuple(data.get("asked") or ())  # recorded since runkit 0.2's field round three
    return DataLayout(tuple(data["global_batches"]), int(data["processes"]), bool(data["per_sample"]), asked)


def check_processes(layout: DataLayout, processes: int, checkpoint: str) -> None:
    """Raises ``ValueError`` naming ``--trainer.devices`` where ``processes`` cannot continue the run of ``layout``."""
    if processes == layout.processes:
        return
    if not layout.per_sample:
        raise ValueError(
            f"--trainer.devices/--trainer.num_nodes: {checkpoint} was written by runkit 0.1 on {layout.processes}"
            f" process(es), whose data order depends on the process count: resume it on {layout.processes}"
        )
    for batch in layout.global_batches:
        if batch is not None and batch % processes:
            shares = [count for count in range(1, batch + 1) if batch % count == 0]
            raise ValueError(
                f"--trainer.devices/--trainer.num_nodes: the run trains on global batches of {batch} samples, which"
                f" {processes} processes cannot share equally: resume on {', '.join(map(str, shares))} processes"
            )


def not_elastic(loaders: list[Any], kept: list[str], sharded_by_user: bool) -> list[str]:
    """Why the train data of a run would not be the same on another number of processes (empty: it would)."""
    reasons = [f"the train loader {line.split(';')[0]}" for line in kept]
    if sharded_by_user:
        reasons.append("the train data is sharded by the project (Trainer(use_distributed_sampler=False))")
    for loader in loaders:
        if not isinstance(loader, DataLoader):
            continue
        if not isinstance(loader, ResumableLoader) and is_stateful(loader):
            reasons.append(f"{type(loader).__name__} saves each process's own position, not the global one")
        dataset = getattr(loader.dataset, "dataset", loader.dataset)  # the user's, inside SeededDataset
        name = type(dataset).__name__
        if callable(getattr(dataset, "__getitems__", None)):
            reasons.append(f"{name} fetches whole batches (__getitems__): its random draws follow each process's batch")
        generators = [key for key, value in getattr(dataset, "__dict__", {}).items() if _is_generator(value)]
        if generators:
            reasons.append(f"{name}.{generators[0]} is a random generator of its own: its draws follow each process")
    return reasons


def _is_generator(value: object) -> bool:
    return isinstance(value, (torch.Generator, np.random.Generator, np.random.RandomState, random.Random))


def dropout_layers(model: pl.LightningModule) -> int:
    """The model's dropout layers that drop anything: each process draws their masks from its own RNG."""
    return sum(1 for module in model.modules() if isinstance(module, DROPOUT) and module.p > 0)


def resume_line(
    saved: DataLayout, layout: DataLayout, reasons: list[str], dropout: int, asked: Sequence[int | None] = ()
) -> str:
    """The one line a resume on another number of processes prints: what stays the same, and what does not (and the
    batch sizes the train loaders ``asked`` for that it did not use: ``not_used``)."""
    line = f"Resumed on {layout.processes} process(es) from {saved.processes}: global batch {_batches(layout)}"
    if reasons:
        line += f"; not elastic: {'; '.join(reasons)}: the data from here differs from an uninterrupted run's"
    else:
        line += ", the same samples at every step as an uninterrupted run"
    if dropout and not reasons:
        line += (
            f"; the model's {dropout} dropout layer(s) draw from each process's own RNG, so their masks (not the data)"
            " differ from an uninterrupted run's"
        )
    return f"{line}; {unused}" if (unused := not_used(asked, saved, layout)) else line


def kept_batch_line(saved: DataLayout, layout: DataLayout, asked: Sequence[int | None]) -> str | None:
    """The one line a resume on the same number of processes prints where a train loader asked for another batch size
    than the run's (``--data.init_args.batch_size 7``): which batch it trains with, and why; ``None`` where none did."""
    if not (unused := not_used(asked, saved, layout)):
        return None
    return f"Resumed on {layout.processes} process(es) with the run's global batch {_batches(layout)}; {unused}"


def not_used(asked: Sequence[int | None], saved: DataLayout, layout: DataLayout) -> str:
    """What a resume says of the per-process batch sizes the train loaders ``asked`` for that it does not use, where
    they differ from what the run's loaders asked for (``run_asked``): a batch size changed for the resume, not the
    config's own on another process count (``""``: none)."""
    kept, before = layout.per_process(layout.processes), run_asked(saved)
    rows = zip(asked, kept, [*before, *[None] * len(asked)], strict=False)
    other = [str(wanted) for wanted, size, was in rows if None not in (wanted, size) and wanted not in (size, was)]
    if not other:
        return ""
    return (
        f"the train loader's batch_size {', '.join(other)} is not used: a run keeps its global batch (the saved"
        " position and the schedule count its batches); to train with another, start a run without --ckpt_path"
    )


def run_asked(saved: DataLayout) -> tuple[int | None, ...]:
    """The batch sizes the run's train loaders asked for (its config's): as recorded, or for a checkpoint that did not
    record them, the per-process batches it trained with."""
    return saved.asked or tuple(saved.per_process(saved.processes))


def _batches(layout: DataLayout) -> str:
    return ", ".join(
        f"{batch} ({batch // layout.processes} per process)" for batch in layout.global_batches if batch is not None
    )
