"""Reading a sharded checkpoint's folder (``sharded_checkpoints.py`` writes them): its manifest checked against the
run's record and each file against the manifest, and what the command line's checks read of it.

A folder ``<name>`` (a link to its current version) holds DCP's shards and index (``__<rank>_<n>.distcp``,
``.metadata``), Lightning's ``meta.pt``, and ``manifest.sha256``: one ``<sha256>  <file>`` line per file, so
``sha256sum -c manifest.sha256`` inside it checks it by hand. The run's ``provenance.yaml`` keeps the manifest's digest
under the name (``digests.py``), so a changed byte in any file, or a changed manifest, is refused before anything loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from ..lightning_internals import SHARDED_METADATA
from ..store import location
from .digests import file_sha256, verify

MANIFEST = "manifest.sha256"


def verify_sharded(path: Path) -> None:
    """Raises ``ValueError`` (one line) unless ``path``'s manifest is the one its run recorded (where it recorded one)
    and every file the manifest lists has its digest. A folder without a manifest loads unchecked, with a line."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        rank_zero_info(f"checkpoint {path}: no {MANIFEST} (not written by runkit): not checked; it loads as it is")
        return
    data = manifest.read_bytes()
    verify(location(str(path)), data)
    for line in data.decode().splitlines():
        expected, _, name = line.partition("  ")
        actual = file_sha256(path / name) if (path / name).is_file() else "missing"
        if actual != expected:
            raise ValueError(
                f"checkpoint {path} is not the folder its run wrote: {name}'s SHA-256 is {actual}, its {MANIFEST}"
                f" says {expected}. Its bytes changed after the write (a failing disk, a damaged copy); use another"
                " checkpoint"
            )


def read_sharded(path: str) -> dict[str, Any]:
    """What ``checkpoint_checks.read_checkpoint`` reads of a sharded checkpoint, checked (``verify_sharded``): its
    ``meta.pt`` (``weights_only``), with a ``state_dict`` of meta tensors of the shapes its DCP index records (the
    index is DCP's pickle: read once its digest matched, when its run recorded one)."""
    folder = Path(path)
    verify_sharded(folder)
    try:
        checkpoint = torch.load(folder / SHARDED_METADATA, map_location="cpu", weights_only=True)
        index = FileSystemReader(folder).read_metadata()
    except Exception as error:
        raise ValueError(f"checkpoint {path} is not readable (truncated or corrupt?): {error!r}") from None
    checkpoint["state_dict"] = {
        key.partition(".")[2]: torch.empty(meta.size, dtype=meta.properties.dtype, device="meta")
        for key, meta in index.state_dict_metadata.items()
        if key.startswith(("state_dict.", "model.")) and isinstance(meta, TensorStorageMetadata)
    }
    return checkpoint
