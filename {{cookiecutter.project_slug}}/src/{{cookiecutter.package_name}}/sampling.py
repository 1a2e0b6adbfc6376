"""The training sampler: a seeded, sharded permutation per epoch that yields ``(epoch, index)`` keys."""

from __future__ import annotations

from collections.abc import Iterator, Sized

from torch.utils.data import DistributedSampler

from .synthetic import SampleKey


class EpochSampler(DistributedSampler):
    """``DistributedSampler`` that tells the dataset which epoch each index is drawn for.

    Being a ``DistributedSampler``, Lightning neither wraps nor replaces it, and calls ``set_epoch``
    on it every epoch; with one process it is an ordinary seeded shuffle.
    """

    def __init__(self, dataset: Sized, num_replicas: int, rank: int, shuffle: bool, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=True)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[SampleKey]:  # type: ignore[override]
        return ((self.epoch, index) for index in super().__iter__())
