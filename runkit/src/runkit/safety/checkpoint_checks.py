"""Checks of a checkpoint before anything loads it: readable, pickle-free, finite, the model's, the bytes its run wrote.

The file ``--ckpt_path`` names is checked here (``run/session.py``) before anything runs, so a bad checkpoint stops
the command with a clear message and leaves every file as it was.
"""

from __future__ import annotations

import io
import pickle
import re
import zipfile
from typing import Any

import torch

from ..store import StorePath, location
from ..text import plain
from .compiled_keys import plain_key
from .digests import verify
from .finite import listed, nonfinite_in_checkpoint


def read_checkpoint(path: str) -> dict[str, Any]:
    """Loads ``path`` with ``weights_only=True``; raises ``ValueError`` saying why it cannot be used (among the
    reasons: its bytes are not those its run recorded, ``digests.py``)."""
    source = location(path)
    if not isinstance(source, StorePath) and source.is_dir():  # a sharded checkpoint's folder (never in a store)
        from .sharded_reads import read_sharded

        return read_sharded(path)
    data = source.read_bytes() if isinstance(source, StorePath) else None  # a store's object: read once
    if (len(data) if data is not None else source.stat().st_size) == 0:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): it was never written, or its disk was full")
    try:
        if data is not None:
            checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        else:
            # mmap: tensors are mapped, not read, so this costs little even for large checkpoints. Only torch's zip
            # format maps; the legacy format (torch < 1.6, or `_use_new_zipfile_serialization=False`) is read whole.
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:
        # torch's message for a refused object names it (and carries terminal colour codes); for bytes that are
        # no pickle at all (a damaged legacy file), it says which opcode it could not read.
        text = plain(str(error))
        if found := re.search(r"GLOBAL (\S+) was not an allowed global|whose module (\S+) is blocked", text):
            raise ValueError(
                f"checkpoint {path} holds pickled Python objects and is refused (it needs {found[1] or found[2]})."
                " Only tensors and plain values load (torch.load weights_only=True); re-save its state_dicts from"
                " code you trust."
            ) from None
        detail = text.partition("WeightsUnpickler error:")[2].strip() or text.strip()
        raise ValueError(
            f"checkpoint {path} is not readable (truncated or corrupt?): {detail.splitlines()[0]}"
        ) from None
    except Exception as error:  # torch reports a damaged file as RuntimeError, EOFError, IndexError, ...
        raise ValueError(f"checkpoint {path} is not readable (truncated or corrupt?): {error!r}") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ValueError(f"checkpoint {path} is not a Lightning checkpoint: it has no 'state_dict'")
    verify(source, data)  # after the checks above, which say more about a file that is not a checkpoint at all
    return checkpoint


def check_checkpoint(path: str, model: torch.nn.Module) -> None:
    """Raises ``ValueError`` unless ``path`` is a readable, pickle-free, finite checkpoint of ``model``'s architecture
    (its keys compared without ``torch.compile``'s ``_orig_mod.``: see ``compiled_keys.py``).

    The message names the model that wrote it, and (a few of each, with their counts) the keys missing from the
    checkpoint, those the model does not have, and those of another shape.
    """
    checkpoint = read_checkpoint(path)
    if bad := nonfinite_in_checkpoint(checkpoint):
        raise ValueError(
            f"checkpoint {path} holds NaN or Inf in {listed(bad)}: its numbers are no result to evaluate, export or"
            " resume from (a run of this kit never writes one; take an earlier checkpoint of its run)"
        )
    # In plain form: a module that compiles its network in `setup` holds `_orig_mod.` keys only after it.
    saved = {plain_key(key): value for key, value in checkpoint["state_dict"].items()}
    expected = {plain_key(key): value for key, value in model.state_dict().items()}
    missing, unexpected = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    resized = [f"{k} {_shape(saved[k])} vs {_shape(v)}" for k, v in expected.items() if _resized(saved, k, v)]
    if missing or unexpected or resized:
        details = "; ".join(
            f"{label} ({len(keys)}): {', '.join(keys[:4])}{', ...' if len(keys) > 4 else ''}{note}"
            for label, keys, note in (
                ("missing", missing, ""),
                ("unexpected", unexpected, ""),
                ("other shape", resized, " (checkpoint vs model)"),
            )
            if keys
        )
        configured = f"{type(model).__module__}.{type(model).__qualname__}"
        writer = checkpoint.get("hyper_parameters", {}).get("_class_path")
        by = "the same class with other arguments" if writer == configured else f"by {writer}"
        raise ValueError(
            f"checkpoint {path} was written by a different model than the configured {configured}"
            f"{f' ({by})' if isinstance(writer, str) else ''}: {details}. Use the config of the run that wrote it"
            " (its run directory holds config.yaml)."
        )


def _shape(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape)) or "scalar"


def _resized(saved: dict[str, object], key: str, value: torch.Tensor) -> bool:
    other = saved.get(key)
    return isinstance(other, torch.Tensor) and other.shape != value.shape
