"""Jinja filters of this template, loaded by cookiecutter through ``_extensions`` in cookiecutter.json."""

from __future__ import annotations

from cookiecutter.utils import simple_filter

# TOML basic strings must escape these; every other character stays as it is (the file is UTF-8).
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


@simple_filter
def toml_string(value: str) -> str:
    """``value`` as a TOML basic string, e.g. ``description = {{ cookiecutter.description | toml_string }}``.

    Jinja's ``tojson`` is not TOML: it writes a character outside the Basic Multilingual Plane (an emoji) as a
    JSON surrogate pair (``\\ud83d\\ude00``), which TOML rejects.
    """
    escaped = "".join(
        _ESCAPES.get(char, f"\\u{ord(char):04x}" if ord(char) < 0x20 or ord(char) == 0x7F else char)
        for char in str(value)
    )
    return f'"{escaped}"'
