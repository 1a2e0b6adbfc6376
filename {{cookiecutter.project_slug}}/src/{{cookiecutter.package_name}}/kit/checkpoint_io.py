"""How checkpoint files are written and read: atomically, and with ``weights_only=True``.

A checkpoint is written to a temporary file in its own directory, flushed and fsynced, then renamed
over the old one, so a crash at any moment leaves either the old file or the new one, never half of
either. Lightning's own ``_atomic_save`` stages the bytes through ``$TMPDIR`` (a cross-device move that
fails, or fills ``/tmp``: lightning#20270, #21253) and never fsyncs.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

MapLocation = Callable[..., Any] | str | torch.device | dict[str, str] | None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint plugin with crash-proof local writes and ``weights_only`` reads.

    Remote paths (``s3://...``) keep Lightning's fsspec transaction.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_save(checkpoint, Path(path))

    def load_checkpoint(
        self,
        path: str | Path,
        map_location: MapLocation = "cpu",
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        # Tensors load onto the CPU, whatever device wrote them; the Trainer then moves the model and the
        # optimizer state to its own device. `weights_only=None` (Lightning's default) means True.
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only is not False)


def atomic_save(obj: object, path: Path) -> None:
    """``torch.save(obj, path)`` through a temporary file in ``path``'s directory: flush, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a writer that was killed mid-save
        stale.unlink(missing_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(partial, "xb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable (POSIX); other systems have no directory handles to sync.
    if os.name != "posix":
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
