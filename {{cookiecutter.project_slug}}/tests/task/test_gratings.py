"""Data: determinism from the seed, split sizes, labels, augmentation, loader settings, the cache, exact resume."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler


def make(gratings: ModuleType, **kwargs: object) -> object:
    settings = {"train_size": 300, "val_size": 50, "test_size": 70, "batch_size": 32, "num_workers": 0}
    datamodule = gratings.GratingsDataModule(**{**settings, **kwargs})
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


def test_split_sizes_and_dtypes(gratings: ModuleType) -> None:
    dm = make(gratings)
    assert {split: len(ds) for split, ds in dm.datasets.items()} == {"train": 300, "val": 50, "test": 70}
    image, label = dm.datasets["val"][0]
    assert image.shape == (1, 28, 28)
    assert image.dtype == torch.float32
    assert label.dtype == torch.int64


def test_same_seed_same_data_other_seed_other_data(gratings: ModuleType) -> None:
    first, again, other = make(gratings, seed=1), make(gratings, seed=1), make(gratings, seed=2)
    for split in ("train", "val", "test"):
        assert torch.equal(first.datasets[split].images, again.datasets[split].images)
        assert torch.equal(first.datasets[split].labels, again.datasets[split].labels)
        assert not torch.equal(first.datasets[split].images, other.datasets[split].images)
    assert not torch.equal(first.datasets["train"].images[:50], first.datasets["val"].images)


def test_labels_are_balanced_and_in_range(gratings: ModuleType) -> None:
    dm = make(gratings, num_classes=7, train_size=700)
    counts = torch.bincount(dm.datasets["train"].labels, minlength=7)
    assert counts.tolist() == [100] * 7


def test_training_samples_are_augmented_on_every_read_from_the_global_rng(gratings: ModuleType) -> None:
    train = make(gratings).datasets["train"]
    torch.manual_seed(0)
    first, second = train[5][0], train[5][0]
    torch.manual_seed(0)
    assert not torch.equal(first, second)  # fresh noise and shift every read ...
    assert torch.equal(train[5][0], first)  # ... drawn from torch's global RNG


def test_evaluation_samples_and_unaugmented_training_samples_are_fixed(gratings: ModuleType) -> None:
    val = make(gratings).datasets["val"]
    assert torch.equal(val[3][0], val[3][0])
    train = make(gratings, augment=False).datasets["train"]  # configs/example/overfit.yaml
    assert torch.equal(train[3][0], train[3][0])


def test_train_loader_is_a_plain_shuffled_loader_with_static_shapes(gratings: ModuleType) -> None:
    loader = make(gratings).train_dataloader()
    assert type(loader) is DataLoader
    assert isinstance(loader.sampler, RandomSampler)
    assert loader.drop_last
    assert len(loader) == 300 // 32
    first = [labels.clone() for _, labels in loader]
    second = [labels.clone() for _, labels in loader]
    assert {len(labels) for labels in first} == {32}
    assert not all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_workers_follow_the_cpu_share(gratings: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    dm = gratings.GratingsDataModule(num_workers=None)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert dm.resolved_num_workers() == 4
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert dm.resolved_num_workers() == 1
    assert gratings.GratingsDataModule(num_workers=3).resolved_num_workers() == 3


def test_loader_settings(gratings: ModuleType) -> None:
    dm = make(gratings, num_workers=2, prefetch_factor=3)
    loader = dm.val_dataloader()
    assert loader.num_workers == 2
    assert loader.persistent_workers
    assert loader.prefetch_factor == 3
    assert not loader.pin_memory  # no trainer on a GPU
    assert make(gratings, num_workers=0).val_dataloader().prefetch_factor is None


def test_cache_in_data_dir_round_trips(gratings: ModuleType, tmp_path: Path) -> None:
    cached = make(gratings, data_dir=str(tmp_path))
    assert len(list(tmp_path.glob("gratings-*.pt"))) == 3
    fresh = make(gratings)
    assert torch.equal(cached.datasets["test"].images, fresh.datasets["test"].images)


def truncate_train_cache(gratings: ModuleType, cache: Path) -> Path:
    make(gratings, data_dir=str(cache))
    (path,) = cache.glob("gratings-train-*.pt")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a copy that stopped half way
    return path


def test_a_truncated_cache_is_named_and_rendered_again(gratings: ModuleType, tmp_path: Path) -> None:
    path = truncate_train_cache(gratings, tmp_path)
    with pytest.warns(UserWarning, match=f"data cache {path} is unreadable"):
        repaired = make(gratings, data_dir=str(tmp_path))
    assert torch.equal(repaired.datasets["train"].images, make(gratings).datasets["train"].images)
    assert len(list(tmp_path.iterdir())) == 3  # no temporary file left behind


def test_an_unreadable_cache_at_setup_is_named(gratings: ModuleType, tmp_path: Path) -> None:
    path = truncate_train_cache(gratings, tmp_path)
    datamodule = gratings.GratingsDataModule(train_size=300, val_size=50, test_size=70, data_dir=str(tmp_path))
    with pytest.raises(ValueError, match=f"data cache {path} is unreadable"):
        datamodule.setup("fit")  # without prepare_data, which would render it again


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 1}, "num_classes must be >= 2"),
        ({"image_size": 0}, "image_size must be >= 1"),
        ({"train_size": 10, "batch_size": 32}, "smaller than batch_size"),
        ({"num_workers": -1}, "num_workers must be >= 0"),
    ],
)
def test_bad_arguments_name_the_problem(gratings: ModuleType, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gratings.GratingsDataModule(**kwargs)
