"""Text for one-line messages: torch and Lightning put terminal colour codes in theirs."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(text: str) -> str:
    """``text`` without terminal colour codes."""
    return _ANSI.sub("", text)
