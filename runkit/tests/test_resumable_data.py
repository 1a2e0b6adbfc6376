"""The data seam's pieces: the sampler, the seeded dataset, the loader's saved position, and the one warning.

Loaders are built as the fixture task builds them (a plain ``DataLoader`` over a dataset that augments from the
torch, ``random`` and NumPy global RNGs) and rebuilt with ``make_resumable``, as ``ExactResume`` does in a fit.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import yaml
from fixture_task import SequenceData, SequenceRegressor, Sequences
from support import submodule
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    SequentialSampler,
    WeightedRandomSampler,
)

SEED = 3


@pytest.fixture(scope="module")
def data() -> ModuleType:
    return submodule("safety.resumable_data")


def sequences(size: int = 64) -> Sequences:
    generator = torch.Generator().manual_seed(0)
    return Sequences(torch.randn(size, 8, generator=generator), torch.randn(size, 1, generator=generator), augment=True)


def rebuilt(data: ModuleType, loader: DataLoader, seed: int = SEED, **sharding: int) -> Any:
    converted, kept = data.make_resumable(loader, seed, **sharding)
    assert kept == []
    return converted


def epoch(loader: Any, number: int, batches: int | None = None) -> list[torch.Tensor]:
    loader.sampler.set_epoch(number)
    return [inputs.clone() for inputs, _ in _take(loader, batches)]


def _take(loader: Any, batches: int | None) -> Iterator[Any]:
    for index, batch in enumerate(loader):
        if batches is not None and index == batches:
            return
        yield batch


def test_sampler_skips_the_trained_part_of_the_recorded_epoch_once(data: ModuleType) -> None:
    sampler = data.ResumableSampler(range(10), num_replicas=1, rank=0, shuffle=True, seed=SEED)
    sampler.set_epoch(2)
    full = list(sampler)
    assert [key[:2] for key in full] == [(SEED, 2)] * 10  # keys carry the seed and the epoch ...
    assert sorted(index for _, _, index in full) == list(range(10))  # ... and a permutation of the indices
    sampler.skip(epoch=2, samples=4)
    assert list(sampler) == full[4:]
    assert list(sampler) == full  # once only
    sampler.skip(epoch=1, samples=4)  # an epoch that is already over: nothing to skip
    assert list(sampler) == full


def test_sampler_shards_like_lightnings_distributed_sampler(data: ModuleType) -> None:
    shards = []
    for rank in (0, 1):
        ours = data.ResumableSampler(range(11), num_replicas=2, rank=rank, shuffle=True, seed=SEED)
        lightnings = DistributedSampler(range(11), num_replicas=2, rank=rank, shuffle=True, seed=SEED)
        ours.set_epoch(1)
        lightnings.set_epoch(1)
        shards.append([index for _, _, index in ours])
        assert shards[-1] == list(lightnings)
    assert len(shards[0]) == len(shards[1]) == 6  # padded to equal shards, as Lightning's own
    assert set(shards[0]) | set(shards[1]) == set(range(11))


@pytest.mark.parametrize("shuffle", [True, False])
def test_rebuilt_loader_shuffles_as_the_users_did(data: ModuleType, shuffle: bool) -> None:
    loader = rebuilt(data, DataLoader(sequences(), batch_size=8, shuffle=shuffle))
    loader.sampler.set_epoch(0)
    first = [index for _, _, index in loader.sampler]
    loader.sampler.set_epoch(1)
    second = [index for _, _, index in loader.sampler]
    if shuffle:
        assert sorted(first) == list(range(64))
        assert first != list(range(64))
        assert first != second
    else:
        assert first == second == list(range(64))


def test_rebuilt_loader_keeps_every_setting(data: ModuleType) -> None:
    generator = torch.Generator().manual_seed(1)
    settings: dict[str, Any] = {
        "batch_size": 7,
        "drop_last": True,
        "num_workers": 2,
        "collate_fn": lambda batch: batch,
        "pin_memory": True,
        "worker_init_fn": lambda worker: None,
        "persistent_workers": True,
        "prefetch_factor": 3,
        "timeout": 9.0,
        "multiprocessing_context": "spawn",
        "in_order": False,
        "generator": generator,
    }
    original = DataLoader(sequences(), shuffle=True, **settings)
    loader = rebuilt(data, original)
    assert type(loader) is data.ResumableLoader
    for name in settings:
        assert getattr(loader, name) == getattr(original, name), name
    assert loader.dataset.dataset is original.dataset
    assert len(loader) == len(original) == 64 // 7
    assert loader.dataset.augment  # attributes are the user's dataset's


@pytest.mark.slow  # worker processes
def test_batches_are_the_same_whatever_the_worker_count(data: ModuleType) -> None:
    runs = [epoch(rebuilt(data, DataLoader(sequences(), batch_size=8, shuffle=True, num_workers=n)), 1) for n in (0, 2)]
    assert len(runs[0]) == 8
    for no_workers, two_workers in zip(*runs, strict=True):
        assert torch.equal(no_workers, two_workers)
    again = epoch(rebuilt(data, DataLoader(sequences(), batch_size=8, shuffle=True)), 2)
    assert not torch.equal(again[0], runs[0][0])  # another epoch, other batches and augmentation


def test_loading_in_the_main_process_leaves_its_rngs_untouched(data: ModuleType) -> None:
    before = random.getstate(), np.random.get_state(), torch.get_rng_state()
    batches = epoch(rebuilt(data, DataLoader(sequences(), batch_size=8, shuffle=True)), 0)
    assert len(batches) == 8
    assert random.getstate() == before[0]
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), before[1], strict=True))
    assert torch.equal(torch.get_rng_state(), before[2])


@pytest.mark.parametrize("workers", [0, 2], ids=["no-workers", "two-workers"])
def test_state_round_trip_continues_from_the_saved_position_with_the_saved_seed(data: ModuleType, workers: int) -> None:
    def loader(seed: int) -> Any:
        return rebuilt(data, DataLoader(sequences(), batch_size=8, shuffle=True, num_workers=workers), seed=seed)

    first = loader(SEED)
    first.sampler.set_epoch(1)
    batches = iter(first)
    seen = [next(batches)[0] for _ in range(3)]
    state = first.state_dict()
    assert state == {"epoch": 1, "batches": 3, "seed": SEED}
    rest = [inputs for inputs, _ in batches]
    second = loader(seed=7)  # the saved seed wins over this process's
    second.load_state_dict(state)
    second.sampler.set_epoch(1)  # after loading, as Lightning 2.6 does on resume
    continued = [inputs for inputs, _ in second]
    assert len(seen) + len(continued) == 8
    assert all(torch.equal(a, b) for a, b in zip(continued, rest, strict=True))
    assert second.state_dict() == {"epoch": 1, "batches": 8, "seed": SEED}
    assert len(epoch(second, 2)) == 8  # the next epoch is whole


def test_a_state_taken_as_the_next_epoch_starts_is_where_the_last_one_ended(data: ModuleType) -> None:
    # A stop as an epoch starts (safety/preemption.py: a signal during the epoch end's saves): Lightning has called
    # set_epoch, the iterator is not made yet. The state saved then must not skip the new epoch.
    def loader() -> Any:
        return rebuilt(data, DataLoader(sequences(), batch_size=8, shuffle=True))

    first = loader()
    epoch(first, 0)
    first.sampler.set_epoch(1)
    assert first.state_dict() == {"epoch": 0, "batches": 8, "seed": SEED}
    second = loader()
    second.load_state_dict(first.state_dict())
    assert second.state_dict() == {"epoch": 0, "batches": 8, "seed": SEED}  # loaded, not run yet: kept as loaded
    assert len(epoch(second, 1)) == 8  # the new epoch is whole


class Stream(IterableDataset):
    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.randn(32, 8))


class OwnLoader(DataLoader):
    pass


class EveryOther(BatchSampler):
    pass


UNRESUMABLE = {
    "iterable": (lambda: DataLoader(Stream(), batch_size=8), "DataLoader over Stream: an IterableDataset"),
    "sampler": (
        lambda: DataLoader(sequences(), batch_size=8, sampler=WeightedRandomSampler([1.0] * 64, 64)),
        "DataLoader over Sequences: a custom sampler (WeightedRandomSampler)",
    ),
    "batch-sampler": (
        lambda: DataLoader(sequences(), batch_sampler=EveryOther(SequentialSampler(range(64)), 8, False)),
        "DataLoader over Sequences: a custom batch_sampler (EveryOther)",
    ),
    "subclass": (lambda: OwnLoader(sequences(), batch_size=8), "OwnLoader over Sequences: a DataLoader subclass"),
    "no-batching": (lambda: DataLoader(sequences(), batch_size=None), "DataLoader over Sequences: batch_size=None"),
}


@pytest.mark.parametrize("case", list(UNRESUMABLE))
def test_a_loader_that_cannot_be_rebuilt_is_kept_and_named(data: ModuleType, case: str) -> None:
    make, named = UNRESUMABLE[case]
    loader = make()
    converted, kept = data.make_resumable({"a": loader, "b": DataLoader(sequences(), batch_size=8)}, SEED)
    assert converted["a"] is loader
    assert type(converted["b"]) is data.ResumableLoader
    assert len(kept) == 1
    assert kept[0].startswith(named), kept


class _UnresumableData(SequenceData):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.datasets["train"], batch_size=16, sampler=WeightedRandomSampler([1.0] * 256, 256))


@pytest.mark.parametrize("datamodule", [SequenceData, _UnresumableData], ids=["plain", "custom-sampler"])
def test_fit_warns_once_about_a_loader_it_cannot_make_resumable(in_tmp: Any, datamodule: type) -> None:
    model, data_module = SequenceRegressor(), datamodule()
    callback = submodule("safety.resume").ExactResume()
    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=0,
        reload_dataloaders_every_n_epochs=1,  # the hook is called every epoch: still one warning
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, data_module)
    ours = [str(warning.message) for warning in caught if "Exact resume" in str(warning.message)]
    if datamodule is SequenceData:
        assert ours == []
        assert type(trainer.train_dataloader) is submodule("safety.resumable_data").ResumableLoader
    else:
        assert len(ours) == 1
        assert "DataLoader over Sequences: a custom sampler (WeightedRandomSampler)" in ours[0]
        assert "mid-epoch" in ours[0]
        assert isinstance(trainer.train_dataloader.sampler, WeightedRandomSampler)  # used as written
    assert "train_dataloader" not in vars(data_module)  # the hook is the datamodule's own again


class NumberedStream(IterableDataset):
    """64 sequences of the fixture's shape, each with its place in the stream as the target; no length."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        inputs = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
        return ((inputs[index], torch.tensor([float(index)])) for index in range(64))


class SizedNumberedStream(NumberedStream):
    def __len__(self) -> int:
        return 64


class StreamData(SequenceData):
    """The fixture's data with a stream of 4 batches for training."""

    def __init__(self, sized: bool = False) -> None:
        super().__init__()
        self.sized = sized

    def train_dataloader(self) -> DataLoader:
        return DataLoader(SizedNumberedStream() if self.sized else NumberedStream(), batch_size=16)


TRAINED: list[tuple[int, int]] = []


class PlaceOfEachBatch(pl.Callback):
    """Records ``(epoch, place of the batch's first sample in the stream)`` of every training batch."""

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, index: int) -> None:
        TRAINED.append((trainer.current_epoch, int(batch[1][0])))


@pytest.mark.parametrize(
    ("sized", "resumed_epoch", "said"),
    [
        # No length: Lightning takes batches until the stream ends, from its start again.
        (False, [0, 16, 32, 48], "runs that whole epoch again from the start of its data (the batches trained"),
        # A length: the batches left, from the stream's start: 0 and 16 twice, 48 never.
        (True, [0, 16], "restarts that epoch's data and stops after the batches left (repeating some samples"),
    ],
    ids=["iterable", "sized-iterable"],
)
def test_the_warning_says_what_a_mid_epoch_resume_of_a_kept_loader_trains(
    cli: ModuleType, in_tmp: Any, sized: bool, resumed_epoch: list[int], said: str
) -> None:
    flags = [
        "--data=test_resumable_data.StreamData",
        f"--data.init_args.sized={sized}",
        "--model.init_args.schedule=step",  # sized by epochs: a stream without a length has no step count
        "--trainer.limit_val_batches=2",
        "--best_checkpoint.monitor=train/loss",
        "--last_checkpoint.every_n_train_steps=2",
        "--trainer.callbacks+=test_resumable_data.PlaceOfEachBatch",
        "--run.name=stream",
    ]
    TRAINED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="injected crash"):
            cli.build_cli(
                ["fit", *flags, "--trainer.callbacks+=runkit.testing.faults.RaiseAtStep", "--trainer.callbacks.step=3"]
            )
    assert TRAINED == [(0, 0), (0, 16), (0, 32)]  # last.ckpt holds the first two
    (warning,) = [str(warning.message) for warning in caught if "Exact resume" in str(warning.message)]
    assert said in warning, warning
    TRAINED.clear()
    cli.build_cli(["fit", *flags, "--ckpt_path=last"])
    assert [place for epoch, place in TRAINED if epoch == 0] == resumed_epoch
    assert [place for epoch, place in TRAINED if epoch == 1] == [0, 16, 32, 48]
    sessions = yaml.safe_load(Path("runs/fixture/stream/provenance.yaml").read_text())["sessions"]
    for session in sessions:  # the facts a resume on another process count would need
        assert session["data"]["elastic"].startswith("not elastic: the train loader DataLoader over ")
        assert "an IterableDataset, whose stream has no position to return to" in session["data"]["elastic"]
