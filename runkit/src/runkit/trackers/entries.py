"""The configured ``trainer.logger``: its entries, each one's class and arguments, and MLflow's store."""

from __future__ import annotations

import importlib
import os
from typing import Any

from jsonargparse import Namespace

LOCAL_STORE = "mlruns"  # MLflow's store without a server: <trainer.default_root_dir>/mlruns


def configured_loggers(value: Any) -> list[Any]:
    """The entries of ``trainer.logger`` (a config entry, a list of them, or ``true``/``false``/``null``)."""
    if value is None or isinstance(value, bool):
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def class_of(entry: Any) -> type | None:
    """The logger class of a config entry (``class_path``) or of a built logger."""
    if isinstance(entry, Namespace) and isinstance(entry.get("class_path"), str):
        module, _, name = entry.class_path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return None
    return type(entry)


def init_args(entry: Any) -> dict[str, Any]:
    init = entry.get("init_args") if isinstance(entry, Namespace) else None
    return init.as_dict() if isinstance(init, Namespace) else dict(init or {})


def tracking_uri(args: dict[str, Any]) -> str | None:
    """The configured ``tracking_uri``, else ``$MLFLOW_TRACKING_URI`` (``None``: the local store)."""
    return args.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or None
