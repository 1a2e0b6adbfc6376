"""Resumable data: the user's own train loader, rebuilt so a run stopped mid-epoch resumes on the very next batch.

A plain ``DataLoader(dataset, batch_size=..., shuffle=True, num_workers=...)`` has no ``state_dict``, so
Lightning restarts the interrupted epoch with a fresh permutation, and augmentation drawn from the global
RNGs in ``__getitem__`` follows whatever stream the workers got: a resumed run trains on other data. Lightning
saves a loader's position only for a loader that has ``state_dict``, and its own injected sampler cannot skip.

``make_resumable`` rebuilds such a loader with every setting kept and three pieces swapped in:

- ``ResumableSampler``, a ``DistributedSampler`` (so Lightning neither wraps nor replaces it, and shards it under
  DDP as its own) seeded from the run seed, that can skip the part of an epoch already trained on and yields
  ``(seed, epoch, index)`` keys, so workers need no state of their own;
- ``SeededDataset``, which hands the user's dataset plain indices and seeds the torch, ``random`` and NumPy
  global RNGs from ``(seed, epoch, index)`` before each sample: augmentation is a function of the sample, whatever
  the worker count, the process count or the point a run resumed at (``elastic.py``);
- ``ResumableLoader``, whose ``state_dict`` (epoch, batches delivered, seed) Lightning stores in checkpoints.

A loader it cannot rebuild (another class, an ``IterableDataset``, a custom sampler or batch sampler, no
automatic batching) is left as written; ``make_resumable`` says why, for the one warning at fit start.
Not covered: draws from a generator the dataset keeps itself (``np.random.default_rng()`` made in
``__init__``), from CUDA's RNG, or in a ``collate_fn`` (made in the main process without workers).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sized
from typing import Any, cast

import numpy as np
import torch
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    get_worker_info,
)

from .seeding import key_seed, seed_global_rngs

SampleKey = tuple[int, int, int]
"""``(seed, epoch, index)``: what the sampler yields for each sample."""


class ResumableSampler(DistributedSampler):
    """A seeded, sharded permutation per epoch that yields ``(seed, epoch, index)`` keys and can skip ahead once."""

    def __init__(
        self, dataset: Sized, num_replicas: int, rank: int, shuffle: bool, seed: int, drop_last: bool = False
    ) -> None:
        super().__init__(
            dataset,  # type: ignore[arg-type]
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        self._skip_epoch, self._skip = -1, 0

    def skip(self, epoch: int, samples: int) -> None:
        """Makes the next pass, if it is over ``epoch``, leave out its first ``samples`` samples (this process's)."""
        self._skip_epoch, self._skip = epoch, samples

    def __iter__(self) -> Iterator[SampleKey]:  # type: ignore[override]
        seed, epoch = self.seed, self.epoch
        indices = super().__iter__()
        if epoch == self._skip_epoch:
            indices = itertools.islice(indices, self._skip, None)  # the part of the epoch already trained on
        self._skip_epoch, self._skip = -1, 0
        return ((seed, epoch, index) for index in indices)


class SeededDataset(Dataset):
    """The user's dataset, given plain indices, with the global RNGs seeded from each sample's key before it is read.

    In a worker process the RNGs serve only the data, so they are simply reseeded. In the main process
    (``num_workers=0``) dropout draws from the same torch RNG: its state is saved and restored around the
    fetch, so training sees the same stream whatever the worker count. Seeding costs about 16 µs a sample (2 µs
    seeding once per batch; docs/resume.md), in the workers when there are any. A dataset that fetches whole
    batches (``__getitems__``), and every dataset of a run started by runkit 0.1 (``per_sample=False``), is seeded
    once per batch, from its first key.
    Attributes other than these are the user's dataset's.
    """

    def __init__(self, dataset: Dataset, per_sample: bool = True) -> None:
        self.dataset, self.per_sample = dataset, per_sample

    def __len__(self) -> int:
        return len(cast(Sized, self.dataset))

    def __getitem__(self, key: SampleKey) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[SampleKey]) -> Any:
        if get_worker_info() is not None:
            return self._fetch(keys)
        saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
        try:
            return self._fetch(keys)
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])

    def _fetch(self, keys: list[SampleKey]) -> Any:
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None or not self.per_sample:
            seed_global_rngs(key_seed(*keys[0]))
            indices = [index for _, _, index in keys]
            return getitems(indices) if getitems is not None else [self.dataset[index] for index in indices]
        samples = []
        for seed, epoch, index in keys:
            seed_global_rngs(key_seed(seed, epoch, index))
            samples.append(self.dataset[index])
        return samples

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the wrapper lacks; `dataset` itself is missing only while unpickling.
        if name in ("dataset", "per_sample"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


class ResumableLoader(DataLoader):
    """A ``DataLoader`` over a ``ResumableSampler`` whose place in the epoch is saved and restored.

    Lightning stores ``state_dict()`` in every checkpoint and hands it back to ``load_state_dict`` on resume
    (``ExactResume`` does when Lightning drops it); the sampler then skips the batches already trained on
    without loading them.
    """

    _batches = 0  # batches of the current epoch delivered so far, counting those skipped on resume
    _counted: int | None = None  # the epoch those batches belong to (the sampler's moves on as the next one starts)
    _resume: dict[str, int] | None = None

    @property
    def resumable_sampler(self) -> ResumableSampler:
        return cast(ResumableSampler, self.sampler)

    def state_dict(self) -> dict[str, int]:
        # Lightning fetches the batches of a sized loader on demand, with no look-ahead, so the batches
        # delivered here are exactly those the loop has consumed when a checkpoint is taken.
        # A stop as an epoch starts (its set_epoch done, its iterator not) saves where the last one ended, and a stop
        # before a resumed run's first batch saves the place it resumed from.
        if self._resume is not None:
            return dict(self._resume)
        sampler = self.resumable_sampler
        epoch = sampler.epoch if self._counted is None else self._counted
        return {"epoch": epoch, "batches": self._batches, "seed": sampler.seed}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        # The saved seed wins: a run resumed with another `seed_everything` continues the same data.
        self.resumable_sampler.seed = state_dict["seed"]
        self.resumable_sampler.skip(state_dict["epoch"], state_dict["batches"] * cast(int, self.batch_size))
        self._resume = dict(state_dict)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # A generator, so the real iterator is made at the first `next`, after Lightning's `set_epoch`: on
        # resume Lightning 2.6 creates the epoch's iterator before `set_epoch`, and workers would start
        # prefetching the wrong epoch.
        return self._epoch()

    def _epoch(self) -> Iterator[Any]:
        epoch, resume = self.resumable_sampler.epoch, self._resume
        self._batches = resume["batches"] if resume is not None and resume["epoch"] == epoch else 0
        self._resume, self._counted = None, epoch
        for batch in super().__iter__():
            self._batches += 1
            yield batch


def make_resumable(
    loaders: Any,
    seed: int,
    num_replicas: int = 1,
    rank: int = 0,
    batch_sizes: list[int | None] | None = None,
    per_sample: bool = True,
) -> tuple[Any, list[str]]:
    """``loaders`` (one loader or Lightning's collections of them) with each plain map-style ``DataLoader`` rebuilt.

    ``batch_sizes`` (one per loader, in ``CombinedLoader``'s order) replaces the batch size each asks for: a run resumed
    on another number of processes keeps its global batch (``elastic.py``). ``per_sample``: see ``SeededDataset``.

    Returns:
        The same structure, rebuilt loaders in place of the originals, and one line per loader left as
        written, naming it and why. Loaders that save their own position (``state_dict``) are kept.
    """
    combined = loaders if isinstance(loaders, CombinedLoader) else CombinedLoader(loaders)
    sizes = batch_sizes if batch_sizes is not None and len(batch_sizes) == len(combined.flattened) else None
    kept: list[str] = []
    rebuilt = []
    for number, loader in enumerate(combined.flattened):
        if not is_stateful(loader):
            reason = why_not_resumable(loader)
            if reason is None:
                size = sizes[number] if sizes is not None else None
                loader = rebuild(loader, seed, num_replicas, rank, size, per_sample)
            else:
                dataset = getattr(loader, "dataset", None)
                over = f" over {type(dataset).__name__}" if dataset is not None else ""
                kept.append(f"{type(loader).__name__}{over}: {reason}; {mid_epoch_resume(loader)}")
        rebuilt.append(loader)
    combined.flattened = rebuilt
    return (loaders if isinstance(loaders, CombinedLoader) else combined.iterables), kept


def why_not_resumable(loader: object) -> str | None:
    """Why ``rebuild`` cannot take ``loader``, or ``None`` if it can."""
    if not isinstance(loader, DataLoader):
        return "not a torch DataLoader"
    if type(loader) is not DataLoader:
        return "a DataLoader subclass, which cannot be rebuilt safely"
    if isinstance(loader.dataset, IterableDataset):
        return "an IterableDataset, whose stream has no position to return to"
    if loader.batch_sampler is None:
        return "batch_size=None (no automatic batching)"
    if type(loader.batch_sampler) is not BatchSampler:
        return f"a custom batch_sampler ({type(loader.batch_sampler).__name__})"
    sampler = loader.sampler
    plain_random = (
        type(sampler) is RandomSampler and not sampler.replacement and sampler.num_samples == len(sampler.data_source)
    )
    if not (plain_random or type(sampler) in (SequentialSampler, DistributedSampler)):
        return f"a custom sampler ({type(sampler).__name__})"
    return None


def mid_epoch_resume(loader: object) -> str:
    """What a run resumed from a mid-epoch checkpoint trains of ``loader``, kept as written: Lightning counts the
    batches trained and makes a new iterator, from the start of the data."""
    try:
        len(loader)  # type: ignore[arg-type]
    except TypeError:  # Lightning takes batches until the data ends
        return (
            "a run resumed from a mid-epoch checkpoint runs that whole epoch again from the start of its data (the"
            " batches trained before the stop are trained twice, and that epoch is longer than the others)"
        )
    return (
        "a run resumed from a mid-epoch checkpoint restarts that epoch's data and stops after the batches left"
        " (repeating some samples and skipping others)"
    )


def rebuild(
    loader: DataLoader,
    seed: int,
    num_replicas: int = 1,
    rank: int = 0,
    batch_size: int | None = None,
    per_sample: bool = True,
) -> ResumableLoader:
    """A ``ResumableLoader`` with every setting of ``loader`` (``batch_size``, if given, replacing its own), which
    ``why_not_resumable`` accepts.

    The order is a ``DistributedSampler``'s: shuffled if the loader shuffled, sharded over ``num_replicas``
    processes like the sampler Lightning injects under DDP, and the partial global batch at the end of an epoch
    dropped if the loader drops its last partial batch. A loader that already had a ``DistributedSampler`` keeps its
    shuffle, seed, shards and ``drop_last``.
    """
    sampler = loader.sampler
    if isinstance(sampler, DistributedSampler):
        settings = {"shuffle": sampler.shuffle, "seed": sampler.seed, "drop_last": sampler.drop_last}
        num_replicas, rank = sampler.num_replicas, sampler.rank
    else:
        settings = {"shuffle": isinstance(sampler, RandomSampler), "seed": seed, "drop_last": loader.drop_last}
    return ResumableLoader(
        SeededDataset(loader.dataset, per_sample),
        batch_size=batch_size or loader.batch_size,
        sampler=ResumableSampler(cast(Sized, loader.dataset), num_replicas, rank, **settings),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        # The workers' base seed is drawn from here when an epoch starts, not from the global RNG of dropout.
        generator=loader.generator if loader.generator is not None else torch.Generator().manual_seed(seed),
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device,
        in_order=loader.in_order,
    )


def is_stateful(loader: object) -> bool:
    """Whether Lightning saves ``loader``'s position: it has ``state_dict`` and ``load_state_dict`` (``_Stateful``)."""
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))
