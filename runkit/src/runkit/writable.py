"""Whether a folder can take the files a command writes, and if not, why: for its one ``error:`` line."""

from __future__ import annotations

import os
from pathlib import Path


def unwritable(folder: Path) -> str | None:
    """Why nothing can be created in the existing ``folder`` (``read-only file system``, ``permission denied``), or
    ``None`` if it can. ``os.access`` answers no for both, without the reason."""
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    if hasattr(os, "statvfs") and os.statvfs(folder).f_flag & os.ST_RDONLY:  # EROFS: root cannot write there either
        return "read-only file system"
    return "permission denied"
