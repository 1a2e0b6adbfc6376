"""Other libraries' messages a user must not read as they are, retold in the kit's one line.

- jsonargparse's ``does not correspond to a subclass of LightningModule`` for a class of the ``pytorch_lightning``
  package (Lightning's former name, still published): the same classes, which the project's ``lightning.pytorch``
  parser does not accept; the line names the import to change, and the file.
- torch's advice, on a checkpoint ``weights_only`` refuses, to re-run ``torch.load`` with ``weights_only=False``: that
  runs any code the file holds; the kit never does, and never passes the advice on.
"""

from __future__ import annotations

import importlib
import inspect
import re

_UNSAFE_ADVICE = re.compile(
    r"\s*(?:\(1\) )?In PyTorch 2\.6, we changed the default value of the `weights_only` argument.*?trusted source\.|"
    r"\s*Re-running `torch\.load` with `weights_only` set to `False`.*?trusted source\.",
    re.DOTALL,
)


def without_unsafe_advice(message: str) -> str:
    """``message`` without torch's advice to load a refused checkpoint with ``weights_only=False`` (which runs any code
    the file holds: the kit never does, and never passes that advice on); a file torch takes for its legacy format
    (which ``weights_only`` cannot read: torch < 1.6, or bytes that are no checkpoint at all, zeros) is said as such."""
    cleaned = _UNSAFE_ADVICE.sub("", message)
    if cleaned != message and "legacy .tar format" in cleaned:
        cleaned += " (not a zip archive: a checkpoint of torch < 1.6, or no checkpoint at all; the kit reads only"
        cleaned += " torch's zip format, without running code a file holds)"
    return cleaned


_NOT_A_SUBCLASS = re.compile(
    r"(?:but |Import path )(?P<path>[\w.]+)(?: either not accessible or invalid)?.*?"
    r"does not correspond to a subclass of (?P<base>\w+)"
)


def other_lightning(message: str) -> str | None:
    """The line for a class jsonargparse refused as ``not a subclass of LightningModule`` (``LightningDataModule``,
    ``Callback``) because it subclasses the ``pytorch_lightning`` package's: the same classes, another package than the
    project's ``lightning.pytorch``, which it does not accept. ``None`` for any other message."""
    found = _NOT_A_SUBCLASS.search(message)
    if found is None:
        return None
    module, _, name = found["path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    bases = [base for base in getattr(cls, "__mro__", ()) if base.__module__.startswith("pytorch_lightning")]
    if not bases:
        return None
    key = message.partition(":")[0]
    where = inspect.getsourcefile(cls) or module
    return (
        f"{key}: {found['path']} subclasses pytorch_lightning's {found['base']}; this project uses lightning.pytorch"
        f" (the same classes from the `lightning` package): in {where}, import `lightning.pytorch as pl` (or `from"
        f" lightning.pytorch import {found['base']}`) instead of `pytorch_lightning`"
    )
