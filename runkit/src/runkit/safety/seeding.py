"""How the kit seeds what shapes the data: a seed per sample for augmentation, a generator per loader for its workers.

A sample's seed depends on ``(seed, epoch, index)`` only, so its augmentation is the same whatever the worker count,
the process count or the point a run resumed at (``resumable_data.SeededDataset``).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader

_MASK64 = (1 << 64) - 1


def own_generators(loaders: Any, seed: int) -> Any:
    """``loaders`` with a generator of their own (seeded from ``seed``) for each ``DataLoader`` that has none.

    A loader without one draws its workers' base seed from the global torch RNG every time an iterator is made:
    the validation loader then shifts the stream dropout draws from, by a different amount in a run that resumed
    (its first validation iterator is made later, outside the sanity check's isolated RNG, with persistent workers).
    """
    for loader in (loaders if isinstance(loaders, CombinedLoader) else CombinedLoader(loaders)).flattened:
        if isinstance(loader, DataLoader) and loader.generator is None:
            loader.generator = torch.Generator().manual_seed(seed)
    return loaders


def key_seed(seed: int, epoch: int, index: int) -> int:
    """A 64-bit seed that depends only on ``(seed, epoch, index)``, well mixed (SplitMix64 over the three)."""
    value = 0
    for part in (seed, epoch, index):
        value = ((value ^ (part & _MASK64)) + 0x9E3779B97F4A7C15) & _MASK64
        value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
        value ^= value >> 31
    return value


def seed_global_rngs(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's CPU global RNGs (not CUDA's: ``torch.manual_seed`` would reset it)."""
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    torch.default_generator.manual_seed(seed)
