"""Config files read strictly: one that is empty, not YAML, not a mapping, or gives a key twice is named, with the line.

jsonargparse reports these as ``Unexpected config:`` or a YAML error located in ``<unicode string>``, and PyYAML
keeps the last of two equal keys silently. ``--config`` (``ConfigFile``) and the configs every command starts from
(``refused_config_files``) are checked here first. A ``--config`` file is also read against the keys the command
has (``misplaced``): jsonargparse takes a list or ``null`` under a group of keys (``trainer: [1, 2]``) as the group's
value, which fails later as an ``AttributeError``, and drops ``{}`` unread, under a misspelled key too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ActionConfigFile, Namespace

from ..project import DEFAULT_CONFIG_ENV
from ..store import is_remote, location
from ..text import plain


def refused_config_files(paths: Iterable[str]) -> str | None:
    """The first of the configs every command starts from that is not a YAML mapping, or ``None`` (jsonargparse
    would not name the file)."""
    for path in paths:
        try:
            check_config_file(path)
        except TypeError as error:
            return f"{error} (a config every command starts from: ${DEFAULT_CONFIG_ENV} or configs/)"
    return None


class ConfigFile(ActionConfigFile):
    """``--config FILE``, refused with the file's name (and line) when it is empty, not YAML or not a mapping.

    jsonargparse reports these as ``Unexpected config:`` or a YAML error located in ``<unicode string>``.
    """

    def __call__(self, parser: object, cfg: object, values: object, option_string: str | None = None) -> None:
        if isinstance(values, str) and location(values).is_file():
            loaded = check_config_file(values)
            # The parser above the subcommands has no `trainer`: each subcommand's parser checks its own keys.
            if isinstance(cfg, Namespace) and "trainer" in cfg and (problem := misplaced(loaded, cfg)):
                raise TypeError(f"config {values}: {problem}")
            if is_remote(values):  # a run's config in a store: jsonargparse reads local files, and YAML text
                values = location(values).read_text(encoding="utf-8")
        super().__call__(parser, cfg, values, option_string)


def misplaced(loaded: dict[Any, Any], keys: Namespace, prefix: str = "") -> str | None:
    """What a config file's mapping gives that the command's ``keys`` cannot take, or ``None``: a list, number, bool or
    (at the top) ``null`` where a group of keys is (``trainer``, ``run``, ...), or ``{}`` under a key that does not
    exist. A class spec (``model``, ``data``) is left to jsonargparse, which checks it against its class; only its
    ``init_args`` are read here, for a file that keeps its class."""
    children = vars(keys)
    for name, value in loaded.items():
        if not isinstance(name, str):
            continue
        key, current = f"{prefix}{name}", children.get(name)
        if name not in children and value == {}:  # jsonargparse drops an empty mapping before it checks the key
            close = difflib.get_close_matches(name, [child for child in children if not child.startswith("_")], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return f"{key}: no such key{hint}; its {{}} would have been ignored"
        if not isinstance(current, Namespace):
            continue
        if "class_path" in current:
            if problem := _in_arguments(value, current, key):
                return problem
        elif isinstance(value, dict):
            if problem := misplaced(value, current, f"{key}."):
                return problem
        elif not isinstance(value, str) and (value is not None or not prefix):  # a string: a config file of its own
            some = ", ".join(list(vars(current))[:3])
            return f"{key} must map its keys to values ({some}, ...), got {value!r}"
    return None


def _in_arguments(value: Any, spec: Namespace, key: str) -> str | None:
    """``misplaced`` in the ``init_args`` a file gives the class ``spec`` names, where it keeps that class."""
    if not isinstance(value, dict) or value.get("class_path", spec.class_path) != spec.class_path:
        return None  # another class: jsonargparse checks its arguments
    arguments, known = value.get("init_args"), spec.get("init_args")
    if isinstance(arguments, dict) and isinstance(known, Namespace):
        return misplaced(arguments, known, f"{key}.init_args.")
    return None


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key given twice in one mapping of a YAML file."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last, silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if key == "<<" or not isinstance(key, (str, int, float, bool)):
                continue  # merge keys repeat by design; unhashable keys fail in PyYAML itself
            if key in seen:
                raise _DuplicateKeyError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep)


MAX_ALIAS_VALUES = 1_000_000
"""The most values YAML aliases may add to a config when expanded: a 600-byte file of nested aliases (an alias bomb)
expands to 10^8 values, which jsonargparse copies until the process runs out of memory."""


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many values ``node`` holds with every alias in it expanded (each node counted once in ``sizes``)."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a recursive alias counts once here: PyYAML builds it as a cycle
        children = [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else node.value
        if isinstance(node, yaml.CollectionNode):
            sizes[id(node)] = 1 + sum(_expanded(child, sizes) for child in children)
    return sizes[id(node)]


def _load(text: str, path: str | Path) -> Any:
    """The YAML document in ``text``, each key once, refused (``TypeError``) where its aliases expand past
    ``MAX_ALIAS_VALUES``; counted on the parsed nodes, before any value is built."""
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}
        values = _expanded(node, sizes)
        if values - len(sizes) > MAX_ALIAS_VALUES:  # what the aliases add to the values written in the file
            raise TypeError(
                f"config {path}: its YAML aliases (*name) expand it to {values:,} values, {len(sizes):,} of them"
                f" written; aliases may add {MAX_ALIAS_VALUES:,} (an alias bomb?): refused before expanding them"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def check_config_file(path: str | Path) -> dict[Any, Any]:
    """``path``'s YAML mapping; raises ``TypeError`` (jsonargparse's type for a bad config) unless it is one, with each
    key once and its aliases within ``MAX_ALIAS_VALUES``."""
    try:
        loaded = _load(location(path).read_text(encoding="utf-8"), path)
    except UnicodeDecodeError:
        raise TypeError(f"config {path} is not a text file") from None
    except _DuplicateKeyError as error:
        raise TypeError(
            f"config {path}{_at(error.problem_mark)}: {error.problem}: YAML would keep only the last"
        ) from None
    except yaml.MarkedYAMLError as error:
        raise TypeError(f"config {path}{_at(error.problem_mark)}: {error.problem} ({_context(error)})") from None
    except yaml.YAMLError as error:
        raise TypeError(f"config {path}: {plain(str(error)).splitlines()[0]}") from None
    if loaded is None:
        raise TypeError(f"config {path} is empty: it should map keys to values, e.g. `trainer:` with `max_epochs: 5`")
    if not isinstance(loaded, dict):
        raise TypeError(
            f"config {path} holds a {type(loaded).__name__}, not a mapping of keys (`trainer:`, `model:`, ...)"
        )
    return loaded


def _at(mark: yaml.Mark | None) -> str:
    return f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _context(error: yaml.MarkedYAMLError) -> str:
    """What the YAML parser was reading, and where that started: "while parsing a flow sequence at line 2, ..."."""
    if error.context is None:
        return "YAML syntax"
    return f"YAML syntax: {error.context}{_at(error.context_mark).replace(',', ' at', 1)}"
