"""A sweep's grid: its axes, read from ``--grid`` flags or a config's ``grid:``, and the cells they make.

An axis is either a **group** of config files (one per cell; an empty item, or ``null`` in YAML, means none of
them) or the values of **one config key**, typed as on ``fit``'s command line::

    --grid configs/example/model.yaml,configs/example/transformer.yaml   # a group
    --grid ,configs/precision/bf16.yaml                                  # none, or bf16
    --grid seed_everything=1,2,3                                         # a key
    --grid model.init_args.network.init_args.widths=[8,16],[16,32]       # commas inside brackets stay

    grid:                                                                # the same in YAML
      - [configs/example/model.yaml, configs/example/transformer.yaml]
      - seed_everything: [1, 2, 3]

A cell is one item of every axis; its name (its run folder's) joins the items' labels: ``transformer,seed=1``.
Axes on ``seed_everything`` are the seeds a result is averaged over (see ``results.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED_KEY = "seed_everything"
NONE = "none"
"""The label of a group's empty item (no file)."""


class GridError(ValueError):
    """An axis that cannot be swept; the message names it."""


@dataclass(frozen=True)
class Axis:
    """One axis: a group of config files (``key`` empty) or the values of one config key."""

    given: str  # as written, for messages: `configs/a.yaml,configs/b.yaml` or `seed_everything=1,2`
    name: str  # the axis's column in tables; the Optuna parameter of its label
    key: str  # the full config key of a key axis; "" for a group
    items: tuple[str | None, ...]  # a group's files (None: none), or each value as a `fit` flag's text
    labels: tuple[str, ...]  # each item's short name, unique within the axis
    digest: str = ""  # the group files' contents: a sweep whose presets changed is another sweep

    @property
    def is_seed(self) -> bool:
        return self.key == SEED_KEY

    def arguments(self, label: str) -> list[str]:
        """The ``fit`` arguments of the item labelled ``label``: ``--config=<file>``, ``--key=value`` or none."""
        item = self.items[self.labels.index(label)]
        if item is None:
            return []
        return [f"--config={item}"] if not self.key else [f"--{self.key}={item}"]


@dataclass(frozen=True)
class Cell:
    """One combination: a label of every axis, by axis name."""

    labels: tuple[tuple[str, str], ...]  # (axis name, label), in the axes' order
    name: str

    def label(self, axis: str) -> str:
        return dict(self.labels)[axis]


def read_axes(grid: list[Any], resolve_key: Any) -> list[Axis]:
    """The axes of ``grid`` (``--grid`` texts and YAML items); ``resolve_key(key)`` gives a key as the parser spells
    it or raises ``GridError`` (with the closest key). Raises ``GridError`` on the first axis that cannot be swept."""
    if not grid:
        raise GridError("--grid: nothing to sweep; give an axis, e.g. --grid seed_everything=1,2,3")
    axes: list[Axis] = []
    for entry in grid:
        given = entry if isinstance(entry, str) else json.dumps(entry)
        if isinstance(entry, str) and _is_key_axis(entry):
            key, _, values = entry.partition("=")
            axes.append(_key_axis(given, key.strip(), split_values(values), resolve_key))
        elif isinstance(entry, str):
            axes.append(_group_axis(given, [item.strip() or None for item in entry.split(",")]))
        elif isinstance(entry, list):
            axes.append(_group_axis(given, [str(item) if item not in (None, "") else None for item in entry]))
        elif isinstance(entry, Mapping) and len(entry) == 1:
            ((key, values),) = entry.items()
            values = values if isinstance(values, list) else [values]
            texts = [value if isinstance(value, str) else json.dumps(value) for value in values]
            axes.append(_key_axis(given, str(key), texts, resolve_key))
        else:
            raise GridError(
                f"--grid {given}: give `file,file` or `key=value,value` (in YAML: a list of files, or `key: [values]`)"
            )
    names = [axis.name for axis in axes]
    for index, axis in enumerate(axes):  # two groups from one folder: example, example-2
        if names.count(axis.name) > 1:
            axes[index] = Axis(axis.given, f"{axis.name}-{names[: index + 1].count(axis.name)}", *_rest(axis))
    keys = [axis.key for axis in axes if axis.key]
    if len(set(keys)) < len(keys):
        raise GridError(f"--grid: the key {next(k for k in keys if keys.count(k) > 1)} is on two axes; join them")
    return axes


def cells(axes: list[Axis]) -> Iterator[Cell]:
    """Every combination, in the axes' order (the last axis changes fastest)."""
    for labels in itertools.product(*(axis.labels for axis in axes)):
        pairs = tuple((axis.name, label) for axis, label in zip(axes, labels, strict=True))
        yield Cell(pairs, cell_name(axes, labels))


def count(axes: list[Axis]) -> int:
    total = 1
    for axis in axes:
        total *= len(axis.labels)
    return total


def cell_name(axes: list[Axis], labels: tuple[str, ...]) -> str:
    """``transformer,seed_everything=1``: a group's label alone, a key's as ``name=value``."""
    parts = [label if not axis.key else f"{axis.name}={label}" for axis, label in zip(axes, labels, strict=True)]
    return ",".join(parts)


def split_values(text: str) -> list[str]:
    """``1,2`` -> ``["1", "2"]``; commas inside brackets, braces or quotes stay: ``[8,16],[16,32]`` is two values."""
    values, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            values.append(current.strip())
            current = ""
            continue
        current += char
    values.append(current.strip())
    return [value for value in values if value]


def is_key_axis(entry: Any) -> bool:
    """Whether a ``grid`` entry is a key's values (``key=v1,v2``, ``{key: [...]}``) rather than a group of files."""
    return (isinstance(entry, str) and _is_key_axis(entry)) or isinstance(entry, Mapping)


def _is_key_axis(text: str) -> bool:
    head = text.split(",")[0]
    return "=" in head and not head.partition("=")[0].strip().endswith((".yaml", ".yml"))


def _key_axis(given: str, key: str, values: list[str], resolve_key: Any) -> Axis:
    if not values:
        raise GridError(f"--grid {given}: an empty axis; list the values of {key}, e.g. {key}=1,2")
    if len(set(values)) < len(values):
        raise GridError(f"--grid {given}: a value is given twice")
    full = resolve_key(key)
    name = [part for part in full.split(".") if part != "init_args"][-1]  # lr, seed_everything, precision
    return Axis(given, name, full, tuple(values), tuple(_unique([_safe(value) for value in values])))


def _group_axis(given: str, items: list[str | None]) -> Axis:
    files = [item for item in items if item is not None]
    if not files:
        raise GridError(f"--grid {given!r}: an empty axis; list config files, e.g. --grid a.yaml,b.yaml")
    if len(set(items)) < len(items):
        raise GridError(f"--grid {given}: an item is given twice")
    contents = hashlib.sha256()
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise GridError(f"--grid {given}: {file}: no such config file")
        contents.update(file.encode() + b"\0" + path.read_bytes() + b"\0")
    stems = [Path(item).stem if item is not None else NONE for item in items]
    if len(set(stems)) < len(stems):  # configs/a/x.yaml and configs/b/x.yaml: a-x, b-x
        stems = [_safe(str(Path(item).with_suffix(""))) if item is not None else NONE for item in items]
    parents = {Path(file).parent.name for file in files}
    name = parents.pop() if len(parents) == 1 else "config"  # configs/example/*.yaml: example
    return Axis(given, name or "config", "", tuple(items), tuple(_safe(stem) for stem in stems), contents.hexdigest())


def _unique(labels: list[str]) -> list[str]:
    if len(set(labels)) == len(labels):
        return labels
    return [f"{label}-{index}" for index, label in enumerate(labels)]  # values that differ only in odd characters


def _safe(text: str) -> str:
    """A label that is safe in a folder name and a shell word: letters, digits and ``._+-=`` kept."""
    return re.sub(r"[^A-Za-z0-9._+=-]+", "-", text).strip("-") or "-"


def _rest(axis: Axis) -> tuple[Any, ...]:
    return axis.key, axis.items, axis.labels, axis.digest
