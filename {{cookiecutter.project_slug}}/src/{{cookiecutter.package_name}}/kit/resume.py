"""Exact resume: the two things a Lightning checkpoint lacks, the RNG states and the position in the epoch.

With both, ``fit --ckpt_path last`` continues an interrupted run as if it had never stopped: the same
batches in the same order, the same dropout masks, bit-identical weights. Both are stored as tensors,
lists and numbers, so checkpoints still load with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from torch.utils.data import DataLoader


class ResumableLoader(DataLoader):
    """A training ``DataLoader`` whose position in the epoch is saved in checkpoints and restored on resume.

    Lightning stores ``state_dict()`` of a train loader that has one in every checkpoint; on resume
    ``load_state_dict`` gets it back (from Lightning, or from ``ExactResume`` where Lightning drops it), and
    the sampler (an ``EpochSampler``: it needs ``epoch`` and ``resume_at``) skips the batches already trained
    on, without loading them. Give the loader its own ``generator``: the loader draws its workers' base seed
    from it when an epoch starts, instead of from the global RNG whose stream dropout uses.
    """

    _batches = 0  # batches of the current epoch delivered so far, counting those skipped on resume
    _resume: dict[str, int] | None = None

    def state_dict(self) -> dict[str, int]:
        # Lightning fetches the batches of a sized loader on demand, with no look-ahead, so the batches
        # delivered here are exactly those the loop has consumed when a checkpoint is taken.
        return {"epoch": int(getattr(self.sampler, "epoch", 0)), "batches": self._batches}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        if not hasattr(self.sampler, "resume_at"):
            return  # e.g. Lightning swapped in a sequential sampler for `overfit_batches`: nothing to skip
        assert self.batch_size is not None, "resuming needs a fixed batch size"
        self.sampler.resume_at(state_dict["epoch"], state_dict["batches"] * self.batch_size)
        self._resume = dict(state_dict)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # A generator, so the real iterator is made at the first `next`, after Lightning's `set_epoch`:
        # when it resumes, Lightning 2.6 creates the epoch's iterator before `set_epoch`, and worker
        # processes would start prefetching in the order of the wrong epoch.
        return self._epoch()

    def _epoch(self) -> Iterator[Any]:
        epoch, resume = getattr(self.sampler, "epoch", 0), self._resume
        self._batches = resume["batches"] if resume is not None and resume["epoch"] == epoch else 0
        self._resume = None
        for batch in super().__iter__():
            self._batches += 1
            yield batch


class ExactResume(Callback):
    """Saves the Python, NumPy and torch (CPU and current CUDA device) RNG states of every process in each
    checkpoint, and restores them, with the loader's position, when training resumes from it.

    Lightning checkpoints hold no RNG state, so dropout and any other random draw would follow another
    stream after a resume. Lightning also drops the saved loader position when ``configure_optimizers``
    reads ``trainer.estimated_stepping_batches`` (lightning#20550), as ours does: it is handed over here.
    Both are restored when training starts, after the sanity check (which runs in an isolated RNG) and
    before the first batch is fetched.
    """

    def __init__(self) -> None:
        self._rng_states: list[dict[str, Any]] | None = None
        self._loader_states: list[dict[str, Any]] = []

    def state_dict(self) -> dict[str, Any]:
        # Every process saves the checkpoint together (rank 0 writes it), so all can contribute their state.
        state = collect_rng_state()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, state)
            return {"rng": states}
        return {"rng": [state]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._rng_states = state_dict["rng"]

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
        self._loader_states = fit_loop.get("state_dict", {}).get("combined_loader", [])

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loaders = trainer.train_dataloader
        flat = loaders if isinstance(loaders, (list, tuple)) else [loaders]
        stateful = [loader for loader in flat if isinstance(loader, ResumableLoader)]
        if self._loader_states and len(stateful) == len(self._loader_states):
            for loader, state in zip(stateful, self._loader_states, strict=True):
                loader.load_state_dict(state)  # the same call as Lightning's, so doing both is harmless
        self._loader_states = []
        states, self._rng_states = self._rng_states, None
        if states is None:
            return
        if len(states) != trainer.world_size:
            rank_zero_warn(
                f"The checkpoint holds the RNG states of {len(states)} processes, this run has {trainer.world_size}:"
                " random draws will differ from the original run."
            )
        restore_rng_state(states[trainer.global_rank % len(states)])


def collect_rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors, lists and numbers (what a ``weights_only`` load accepts)."""
    version, python_state, gauss = random.getstate()
    name, keys, position, has_gauss, cached = np.random.get_state(legacy=True)  # type: ignore[misc]
    state: dict[str, Any] = {
        "python": [version, list(python_state), gauss],
        "numpy": [name, keys.tolist(), position, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    # Only the device this process uses, and only if CUDA is already initialised: never create contexts.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Sets this process's RNG states from ``collect_rng_state()``'s output."""
    version, python_state, gauss = state["python"]
    random.setstate((version, tuple(python_state), gauss))
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    # A CPU checkpoint on a GPU machine (or the reverse) restores what both sides have.
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
