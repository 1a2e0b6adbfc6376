"""The training sampler: a seeded, sharded permutation per epoch that yields ``(epoch, index)`` keys."""

from __future__ import annotations

from collections.abc import Iterator, Sized

from torch.utils.data import DistributedSampler

SampleKey = int | tuple[int, int]
"""A dataset index, or ``(epoch, index)`` when augmentation should differ per epoch."""


class EpochSampler(DistributedSampler):
    """``DistributedSampler`` that tells the dataset which epoch each index is drawn for.

    Being a ``DistributedSampler``, Lightning neither wraps nor replaces it, and calls ``set_epoch``
    on it every epoch; with one process it is an ordinary seeded shuffle.
    """

    def __init__(self, dataset: Sized, num_replicas: int, rank: int, shuffle: bool, seed: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=True)  # type: ignore[arg-type]
        self.resume_epoch, self.resume_offset = -1, 0

    def resume_at(self, epoch: int, offset: int) -> None:
        """Makes the next pass over ``epoch`` (if it is the next pass) start after its first ``offset`` samples."""
        self.resume_epoch, self.resume_offset = epoch, offset

    def __iter__(self) -> Iterator[SampleKey]:  # type: ignore[override]
        epoch, indices = self.epoch, list(super().__iter__())
        if epoch == self.resume_epoch:
            indices = indices[self.resume_offset :]  # the part of this epoch's permutation already trained on
        self.resume_epoch, self.resume_offset = -1, 0
        return ((epoch, index) for index in indices)
