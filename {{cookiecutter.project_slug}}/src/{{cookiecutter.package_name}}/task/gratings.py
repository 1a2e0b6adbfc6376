"""The example task's data: oriented gratings under noise, rendered from a seed, and its DataModule.

Class ``k`` of ``C`` is a sinusoidal grating at orientation ``(k + jitter) * pi / C`` with random
frequency, phase, position and extent, seen through a Gaussian window. Nothing is downloaded; the
whole set is a pure function of its seed, so every process of a distributed run builds the same one.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
from runkit import InvalidDataError, TensorFiles, atomic_save, check_samples
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

SPLITS = ("train", "val", "test")
_CHUNK = 8192  # samples rendered at once: bounds peak memory for large sets


def render_gratings(
    num_samples: int, num_classes: int, image_size: int, in_channels: int, seed: int
) -> tuple[Tensor, Tensor]:
    """Renders noise-free gratings and balanced labels.

    Returns:
        ``(images, labels)``: float16 ``(N, C, H, W)`` in ``[-1, 1]`` and int64 ``(N,)``.
    """
    generator = torch.Generator().manual_seed(seed)
    labels = (torch.arange(num_samples) % num_classes)[torch.randperm(num_samples, generator=generator)]
    images = torch.empty(num_samples, in_channels, image_size, image_size, dtype=torch.float16)  # all written below
    axis = torch.arange(image_size, dtype=torch.float32)
    ys, xs = torch.meshgrid(axis, axis, indexing="ij")  # (H, W)
    for start in range(0, num_samples, _CHUNK):
        label = labels[start : start + _CHUNK].to(torch.float32)
        n = len(label)

        def uniform(low: float, high: float, channels: int = 1, n: int = n) -> Tensor:
            return low + (high - low) * torch.rand(n, channels, 1, 1, generator=generator)  # (n, channels, 1, 1)

        theta = (label[:, None, None, None] + uniform(-0.4, 0.4)) * math.pi / num_classes
        freq, phase = uniform(0.15, 0.35), uniform(0.0, 2 * math.pi)  # cycles per pixel, radians
        cx, cy = uniform(0.3, 0.7) * image_size, uniform(0.3, 0.7) * image_size
        sigma = uniform(0.2, 0.35) * image_size
        dx, dy = xs - cx, ys - cy  # (n, 1, H, W)
        window = torch.exp(-(dx**2 + dy**2) / (2 * sigma**2))
        wave = torch.cos(2 * math.pi * freq * (dx * torch.cos(theta) + dy * torch.sin(theta)) + phase)
        contrast = uniform(0.6, 1.0, in_channels)  # per-channel contrast
        images[start : start + n] = (contrast * window * wave).to(torch.float16)  # (n, C, H, W)
    return images, labels


class GratingsDataset(Dataset[tuple[Tensor, Tensor]]):
    """In-memory gratings with pixel noise; for training, random shifts and fresh noise on every read."""

    def __init__(self, images: Tensor, labels: Tensor, noise: float, max_shift: int, seed: int, augment: bool) -> None:
        assert images.shape[0] == labels.shape[0], "one label per image"
        self.images, self.labels = images, labels
        self.noise, self.max_shift, self.seed, self.augment = noise, max_shift, seed, augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image = self.images[index].to(torch.float32)  # (C, H, W)
        if self.augment:
            # Ordinary augmentation from torch's global RNG: the kit seeds it per batch (runkit.safety.resumable_data),
            # so it is reproducible whatever the worker count, and a resumed run draws what it would have.
            if self.max_shift:
                dy, dx = torch.randint(-self.max_shift, self.max_shift + 1, (2,)).tolist()
                image = torch.roll(image, shifts=(dy, dx), dims=(1, 2))
            return image + self.noise * torch.randn(image.shape), self.labels[index]
        # Evaluation: the same noise for a sample every time it is read.
        generator = torch.Generator().manual_seed(self.seed * len(self) + index)
        return image + self.noise * torch.randn(image.shape, generator=generator), self.labels[index]


class GratingsDataModule(pl.LightningDataModule):
    """Oriented gratings under noise, generated from a seed; no download, no extra dependency.

    ``num_classes`` and ``input_shape`` are linked by the CLI into the model, which builds its network
    with them), so they are set in this one place.
    """

    def __init__(
        self,
        num_classes: int = 10,
        image_size: int = 28,
        in_channels: int = 1,
        train_size: int = 10_000,
        val_size: int = 2_000,
        test_size: int = 2_000,
        noise: float = 0.9,
        max_shift: int = 2,
        augment: bool = True,
        seed: int = 0,
        data_dir: str | None = None,
        batch_size: int = 128,
        num_workers: int | None = None,
        pin_memory: bool | None = None,
        persistent_workers: bool = True,
        prefetch_factor: int = 2,
        predict_path: str | None = None,
    ) -> None:
        """Configures the data.

        Args:
            num_classes: Number of grating orientations to tell apart.
            image_size: Height and width of the images.
            in_channels: Image channels.
            train_size: Training samples.
            val_size: Validation samples.
            test_size: Test samples (also the predict set).
            noise: Standard deviation of the Gaussian pixel noise; the grating's amplitude is <= 1.
            max_shift: Largest random translation, in pixels, applied to training samples.
            augment: Training samples get a random shift and fresh noise on every read; ``false`` gives them
                fixed noise and no shift, as evaluation samples have (``configs/example/overfit.yaml``).
            seed: Seed of the data itself, independent of the training seed.
            data_dir: Where ``prepare_data`` caches the rendered splits; ``None`` renders in memory
                in every process (deterministic, so all ranks agree).
            batch_size: Samples per batch, per process.
            num_workers: DataLoader worker processes; ``None`` picks
                ``min(4, cpus_per_process - 1)``, where CPUs are shared among this node's processes.
            pin_memory: Pin host memory for faster, asynchronous copies; ``None`` means on exactly
                when training on a GPU.
            persistent_workers: Keep workers alive between epochs (when ``num_workers > 0``).
            prefetch_factor: Batches each worker loads ahead (when ``num_workers > 0``).
            predict_path: Inputs of ``predict``: a ``.pt`` file of ``(N, C, H, W)`` images or a folder of ``.pt``
                files; ``None`` predicts the test split.
        """
        super().__init__()
        for name, value in {"num_classes": num_classes, "image_size": image_size, "in_channels": in_channels}.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        if train_size < batch_size:
            raise ValueError(f"train_size={train_size} is smaller than batch_size={batch_size}: no full batch")
        if num_workers is not None and num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 or null, got {num_workers}")
        for name, value in {"val_size": val_size, "test_size": test_size, "max_shift": max_shift}.items():
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if prefetch_factor < 1:
            raise ValueError(f"prefetch_factor must be >= 1, got {prefetch_factor}")
        _check_memory(train_size + val_size + test_size, in_channels, image_size)
        self.num_classes, self.image_size, self.in_channels = num_classes, image_size, in_channels
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.noise, self.max_shift, self.augment, self.seed = noise, max_shift, augment, seed
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.batch_size = batch_size
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.persistent_workers, self.prefetch_factor = persistent_workers, prefetch_factor
        self.predict_path = predict_path
        self.datasets: dict[str, GratingsDataset] = {}

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image: linked into the network by the CLI."""
        return (self.in_channels, self.image_size, self.image_size)

    def prepare_data(self) -> None:
        # Runs once per node, before `setup`: the place for downloads and caches, never for state.
        if self.data_dir is None:
            return
        for split in SPLITS:
            path = self._cache_path(split)
            if path.exists() and _readable(path):
                continue
            if path.exists():  # e.g. truncated by a full disk or a copy that stopped: rendered again, not kept
                warnings.warn(
                    f"data cache {path} is unreadable (truncated or corrupt): rendering it again", stacklevel=2
                )
            images, labels = self._render(split)
            atomic_save({"images": images, "labels": labels}, path)  # never a half-written cache

    def setup(self, stage: str) -> None:
        # Runs in every process: build the state this process needs.
        for split in SPLITS:
            if split not in self.datasets:
                images, labels = self._load(split)
                check_samples(split, images, labels, self.num_classes, self.input_shape)
                self.datasets[split] = GratingsDataset(
                    images,
                    labels,
                    self.noise,
                    self.max_shift,
                    self._split_seed(split),
                    augment=self.augment and split == "train",
                )

    def train_dataloader(self) -> DataLoader:
        # drop_last keeps every training batch the same shape, so a compiled graph is never rebuilt. Under DDP
        # Lightning shards it, and the kit makes it resume exactly; nothing here needs to know.
        return self._loader(self.datasets["train"], shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.datasets["val"])

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.datasets["test"])

    def predict_dataloader(self) -> DataLoader:
        if self.predict_path is None:
            return self._loader(self.datasets["test"])
        return self._loader(TensorFiles(self.predict_path, self.input_shape))

    def resolved_num_workers(self) -> int:
        """Workers per process: the configured count, or one less than this process's CPU share."""
        if self.num_workers is not None:
            return self.num_workers
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        local_processes = self.trainer.num_devices if self.trainer else 1
        return max(0, min(4, cpus // local_processes - 1))

    def _loader(self, dataset: Dataset, shuffle: bool = False, drop_last: bool = False) -> DataLoader:
        workers = self.resolved_num_workers()
        on_gpu = bool(self.trainer) and self.trainer.accelerator.__class__.__name__ == "CUDAAccelerator"
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            drop_last=drop_last,
            num_workers=workers,
            pin_memory=on_gpu if self.pin_memory is None else self.pin_memory,
            persistent_workers=self.persistent_workers and workers > 0,
            prefetch_factor=self.prefetch_factor if workers > 0 else None,
        )

    def _split_seed(self, split: str) -> int:
        return self.seed * len(SPLITS) + SPLITS.index(split)

    def _render(self, split: str) -> tuple[Tensor, Tensor]:
        return render_gratings(
            self.sizes[split], self.num_classes, self.image_size, self.in_channels, self._split_seed(split)
        )

    def _cache_path(self, split: str) -> Path:
        assert self.data_dir is not None
        spec = f"{self.sizes[split]}-{self.num_classes}-{self.image_size}-{self.in_channels}-{self._split_seed(split)}"
        return self.data_dir / f"gratings-{split}-{hashlib.sha1(spec.encode()).hexdigest()[:12]}.pt"

    def _load(self, split: str) -> tuple[Tensor, Tensor]:
        if self.data_dir is None:
            return self._render(split)
        path = self._cache_path(split)
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: call prepare_data() before setup()")
        try:
            cached = torch.load(path, weights_only=True)
            return cached["images"], cached["labels"]
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError, KeyError, TypeError) as error:
            raise InvalidDataError(
                f"data cache {path} is unreadable ({error}): prepare_data() renders it again"
            ) from error


def _check_memory(num_samples: int, in_channels: int, image_size: int) -> None:
    """Raises ``ValueError`` when the rendered splits would not fit in this machine's memory (torch would fail to
    allocate them with a traceback, or the system would kill the process)."""
    pixels = image_size * image_size
    # The images (float16), and while rendering a chunk: about 8 float32 arrays of (chunk, H, W).
    needed = num_samples * in_channels * pixels * 2 + min(num_samples, _CHUNK) * pixels * 4 * 8
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): leave it to the allocator
        return
    if needed > memory:
        raise ValueError(
            f"image_size={image_size}: the {num_samples:,} images would need {needed / 2**30:,.0f} GiB of memory, and"
            f" this machine has {memory / 2**30:,.0f} GiB: lower image_size or the split sizes"
        )


def _readable(path: Path) -> bool:
    """Whether ``path`` is a complete cache file; memory-mapped, so its tensors are not read."""
    try:
        cached = torch.load(path, weights_only=True, mmap=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):
        return False
    return isinstance(cached, dict) and {"images", "labels"} <= cached.keys()
