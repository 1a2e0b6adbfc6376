"""A loader that saves its own position (torchdata's ``StatefulDataLoader``) keeps it, and its workers' RNG states too.

The end-to-end case (a SIGTERM mid-epoch, ``fit --ckpt_path last``, bit-identical weights) is in
``test_foreign_code.py``; here the pieces: a restored loader continues with the very batches, augmentation included,
that the uninterrupted one went on to load, and a loader whose workers' draws cannot be saved is named once.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from fixture_task import SequenceData, SequenceRegressor
from support import submodule
from torch import Tensor
from torch.utils.data import Dataset, IterableDataset, TensorDataset

stateful_dataloader = pytest.importorskip(
    "torchdata.stateful_dataloader", reason="StatefulDataLoader comes from torchdata (the dev extra)"
)
StatefulDataLoader = stateful_dataloader.StatefulDataLoader


class Noisy(Dataset):
    """Each sample is its index and noise from the global torch RNG: in a worker, that worker's stream."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, index: int) -> Tensor:
        return torch.cat([torch.tensor([float(index)]), torch.randn(2)])  # (3,)


class CountingNoisy(Noisy):
    """The same, with a state of its own (the samples it has loaded), which torchdata saves per worker."""

    def __init__(self) -> None:
        self.loaded = 0

    def __getitem__(self, index: int) -> Tensor:
        self.loaded += 1
        return torch.cat([super().__getitem__(index), torch.tensor([float(self.loaded)])])

    def state_dict(self) -> dict[str, int]:
        return {"loaded": self.loaded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loaded = state["loaded"]


class Stream(IterableDataset):
    """Sequences and targets as the fixture task's model takes them, from a stream."""

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return iter(zip(torch.randn(16, 16), torch.randn(16, 1), strict=True))


def loader(dataset: Dataset, keep: bool, worker_init_fn: Any = None) -> Any:
    made = StatefulDataLoader(
        dataset,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(0),
        worker_init_fn=worker_init_fn,
    )
    if keep:
        assert submodule("safety.stateful_loaders").keep_worker_rngs(made) == []
    return made


@pytest.mark.parametrize("dataset_type", [Noisy, CountingNoisy], ids=["plain", "own-state"])
def test_a_restored_loader_loads_the_same_batches_with_the_same_augmentation(dataset_type: type[Noisy]) -> None:
    def continued(keep: bool) -> tuple[list[Tensor], list[Tensor]]:
        first = loader(dataset_type(), keep)
        batches = iter(first)
        for _ in range(3):
            next(batches)
        state = first.state_dict()
        expected = list(batches)
        second = loader(dataset_type(), keep)
        second.load_state_dict(state)
        return expected, list(second)

    expected, resumed = continued(keep=True)
    assert len(resumed) == len(expected) == 48 // 4 - 3
    assert all(torch.equal(a, b) for a, b in zip(resumed, expected, strict=True))
    # Without: the same samples (the loader's own position), other noise (its workers started from their first seed).
    expected, resumed = continued(keep=False)
    assert torch.equal(torch.stack(resumed)[..., 0], torch.stack(expected)[..., 0])
    assert not any(torch.equal(a[:, 1:3], b[:, 1:3]) for a, b in zip(resumed, expected, strict=True))


def _note_worker(worker_id: int) -> None:
    torch.utils.data.get_worker_info().dataset.noted = worker_id


def test_the_loaders_own_worker_init_fn_still_runs_first() -> None:
    made = loader(Noisy(), keep=True, worker_init_fn=_note_worker)
    assert made.worker_init_fn.worker_init_fn is _note_worker
    assert submodule("safety.stateful_loaders").keep_worker_rngs(made) == []  # the same loader again: once
    assert made.worker_init_fn.worker_init_fn is _note_worker
    assert len(list(made)) == 12


def test_loaders_whose_workers_draws_cannot_be_saved_are_named() -> None:
    keep_worker_rngs = submodule("safety.stateful_loaders").keep_worker_rngs
    stream = StatefulDataLoader(Stream(), batch_size=4, num_workers=2)
    listed = StatefulDataLoader([torch.zeros(2)] * 8, batch_size=4, num_workers=2)  # a list takes no attributes
    without_workers = StatefulDataLoader(Stream(), batch_size=4)
    assert keep_worker_rngs({"a": stream, "b": listed, "c": without_workers}) == [
        "StatefulDataLoader over Stream: an IterableDataset, whose stream in each worker is its own to save",
        "StatefulDataLoader over list: a dataset that takes no attributes, so it cannot report its workers' RNG states",
    ]
    assert stream.worker_init_fn is listed.worker_init_fn is None


class _StreamData(SequenceData):
    def train_dataloader(self) -> Any:
        return StatefulDataLoader(Stream(), batch_size=4, num_workers=2)


@pytest.mark.parametrize("given", ["hook", "fit"])
def test_fit_says_once_what_a_resume_will_not_reproduce(in_tmp: Any, given: str) -> None:
    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=0,
        reload_dataloaders_every_n_epochs=1,  # the hook is called every epoch: still one warning
        callbacks=[submodule("safety.resume").ExactResume()],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if given == "hook":
            trainer.fit(SequenceRegressor(), _StreamData())
        else:  # its workers start before the kit sees it, with any map-style dataset
            pairs = TensorDataset(torch.randn(16, 16), torch.randn(16, 1))
            trainer.fit(SequenceRegressor(), StatefulDataLoader(pairs, batch_size=4, num_workers=2))
    ours = [str(warning.message) for warning in caught if "Exact resume" in str(warning.message)]
    assert len(ours) == 1
    if given == "hook":
        assert "StatefulDataLoader over Stream: an IterableDataset" in ours[0]
    else:
        assert "StatefulDataLoader: passed to `fit` directly" in ours[0]
    assert "not its workers' random state" in ours[0]
    assert "repeating some samples" not in ours[0]  # its position is saved
