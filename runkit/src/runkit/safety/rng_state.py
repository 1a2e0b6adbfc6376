"""A process's global RNG states (Python, NumPy, torch CPU and CUDA) as plain data, saved and restored.

Tensors, lists and numbers only, so a checkpoint that holds them still loads with
``torch.load(..., weights_only=True)``. ``ExactResume`` saves the training processes' states, ``stateful_loaders``
those of a loader's workers.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


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
    if torch.cuda.is_initialized():  # False in a forked DataLoader worker
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
