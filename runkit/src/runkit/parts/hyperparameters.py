"""Hyperparameters a checkpoint can be loaded with under ``weights_only``: the constructor's config values only.

Under the CLI a module's arguments are the plain config (a class path and its arguments), so
``load_from_checkpoint`` rebuilds it. Built in code they can be live objects (a network, a ``functools.partial``),
which ``torch.load(weights_only=True)`` refuses: those are left out of ``hparams`` (a load then needs them given).
"""

from __future__ import annotations

import inspect

import lightning.pytorch as pl


def save_plain_hyperparameters(module: pl.LightningModule) -> None:
    """``module.save_hyperparameters()`` from its ``__init__``, without arguments that are not config types."""
    caller = inspect.currentframe()
    frame = caller.f_back if caller is not None else None  # the module's __init__, as Lightning reads it
    module.save_hyperparameters(frame=frame)
    if live := [name for name, value in module.hparams.items() if not is_plain(value)]:
        module.save_hyperparameters(ignore=live, frame=frame)


def is_plain(value: object) -> bool:
    """Whether ``value`` is built of config types only (what a ``weights_only`` load accepts)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_plain(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))
