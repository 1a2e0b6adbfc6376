"""An embedded, learnable image-classification task: oriented gratings under noise.

Class ``k`` of ``C`` is a sinusoidal grating at orientation ``(k + jitter) * pi / C`` with random
frequency, phase, position and extent, seen through a Gaussian window. Nothing is downloaded; the
whole set is a pure function of its seed, so every process of a distributed run builds the same one.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.utils.data import Dataset

SampleKey = int | tuple[int, int]
"""A dataset index, or ``(epoch, index)`` when augmentation should differ per epoch."""

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


def sample_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    """A generator that depends only on ``(seed, epoch, index)``.

    Augmentation drawn from it is identical whatever the worker count, the process that loads the
    sample, or where a run was resumed: the property exact resume relies on.
    """
    return torch.Generator().manual_seed(((seed * 1_000_003 + epoch) * 1_000_033 + index) % 2**63)


class SyntheticImages(Dataset[tuple[Tensor, Tensor]]):
    """In-memory gratings with per-sample noise; optional random shifts for training."""

    def __init__(self, images: Tensor, labels: Tensor, noise: float, max_shift: int, seed: int, augment: bool) -> None:
        assert images.shape[0] == labels.shape[0], "one label per image"
        self.images, self.labels = images, labels
        self.noise, self.max_shift, self.seed, self.augment = noise, max_shift, seed, augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: SampleKey) -> tuple[Tensor, Tensor]:
        # Training keys carry the epoch, so noise and shifts change every epoch yet stay reproducible;
        # a plain index (evaluation, overfit runs) always gets the same noise.
        epoch, index = key if isinstance(key, tuple) else (-1, key)
        generator = sample_generator(self.seed, epoch, index)
        image = self.images[index].to(torch.float32)  # (C, H, W)
        if self.augment and self.max_shift:
            dy, dx = torch.randint(-self.max_shift, self.max_shift + 1, (2,), generator=generator).tolist()
            image = torch.roll(image, shifts=(dy, dx), dims=(1, 2))
        image = image + self.noise * torch.randn(image.shape, generator=generator)
        return image, self.labels[index]
