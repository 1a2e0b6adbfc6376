"""Finding NaN and Inf in tensors: a model's parameters, a checkpoint's weights and optimizer states."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


def nonfinite_names(tensors: Iterable[tuple[str, Tensor]]) -> list[str]:
    """The names of the floating-point tensors that hold a NaN or an Inf, among ``(name, tensor)`` pairs (a meta tensor
    holds no numbers: a sharded checkpoint's weights as its index describes them)."""
    return [
        name
        for name, value in tensors
        if (value.is_floating_point() or value.is_complex())
        and value.device.type != "meta"
        and not bool(torch.isfinite(value).all())
    ]


def named_tensors(value: Any, name: str = "") -> list[tuple[str, Tensor]]:
    """Every tensor in nested dicts and lists, named by its path (``optimizer_states.0.state.3.exp_avg``)."""
    if isinstance(value, Tensor):
        return [(name, value)]
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return []
    return [pair for key, item in items for pair in named_tensors(item, f"{name}.{key}" if name else str(key))]


def nonfinite_in_checkpoint(checkpoint: dict[str, Any]) -> list[str]:
    """The non-finite tensors of a checkpoint's weights and optimizer states, named by their path in it."""
    found = {key: checkpoint.get(key) for key in ("state_dict", "optimizer_states")}
    return nonfinite_names(named_tensors(found))


def listed(names: list[str], most: int = 3) -> str:
    """A few of ``names`` and how many there are, for a one-line message."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f"{', '.join(names[:most])}{more} ({len(names)} tensor{'s' if len(names) != 1 else ''})"
