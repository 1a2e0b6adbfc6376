"""The search space: config keys and the values each may take, checked against the config before any trial runs.

Written in YAML under ``space``, keyed by the same keys as ``fit``'s flags (``init_args`` may be left out where
jsonargparse allows it, e.g. ``model.optimizer.init_args.lr``)::

    space:
      model.init_args.optimizer.init_args.lr: {float: [1.0e-4, 1.0e-2], log: true}
      model.init_args.network.init_args.widths: {choice: [[8, 16], [16, 32]]}
      model.init_args.network: {choice: [pkg.task.networks.ConvNet, pkg.task.networks.TransformerClassifier]}
      data.init_args.batch_size: {int: [32, 256], log: true}

``float`` and ``int`` take ``log`` (sample on a log scale) or ``step``; a ``choice`` holds any YAML values, class
paths included. Each trial sets its values as ``--key=value`` flags of a ``fit``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna

SpaceSpec = dict[str, dict[str, Any]]

# Keys a trial cannot take from the space: the search sets them to give each trial its own run directory.
RESERVED_KEYS = ("run.", "trainer.default_root_dir")
_OPTIONS = {"float": {"log", "step"}, "int": {"log", "step"}, "choice": set()}


class SpaceError(ValueError):
    """A key or range of the search space that cannot be searched; the message names the key."""


@dataclass(frozen=True)
class Dimension:
    """One searched config key: a ``float`` or ``int`` range, or a ``choice`` among values."""

    key: str  # the full config key, e.g. `model.init_args.optimizer.init_args.lr`
    kind: str  # "float", "int" or "choice"
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    @property
    def name(self) -> str:
        """A short name for tables: the last two parts of the key without ``init_args`` (``optimizer.lr``)."""
        return ".".join([part for part in self.key.split(".") if part != "init_args"][-2:])

    def suggest(self, trial: optuna.Trial) -> Any:
        """The trial's value (a retried trial gets its earlier value back)."""
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        # Optuna's categorical values are plain scalars: lists and mappings travel as their JSON text.
        encoded = trial.suggest_categorical(self.key, [_encode(choice) for choice in self.choices])
        return self.choices[[_encode(choice) for choice in self.choices].index(encoded)]

    def extremes(self) -> list[Any]:
        """The values the config must accept before the search starts: both ends of a range, every choice."""
        if self.kind == "choice":
            return list(self.choices)
        cast = int if self.kind == "int" else float
        return [cast(self.low), cast(self.high)]

    def flag(self, value: Any) -> str:
        """The ``fit`` flag that sets ``value``."""
        return flag(self.key, value)


def flag(key: str, value: Any) -> str:
    """The ``fit`` flag ``--key=value``; values other than strings as JSON (``[16, 32]``, ``true``, ``0.001``)."""
    return f"--{key}={value if isinstance(value, str) else json.dumps(value)}"


def build_space(spec: Mapping[str, Any], keys: list[str], accepts: Callable[[str, Any], str | None]) -> list[Dimension]:
    """Checks every key and range of ``spec`` and returns the dimensions; raises ``SpaceError`` on the first problem.

    ``keys``: every leaf key of the parsed config; ``accepts(key, value)``: why the config refuses a value, or ``None``.
    """
    if not spec:
        raise SpaceError("space: nothing to search; give at least one key, e.g. `model.init_args.lr: {float: [...]}`")
    dimensions = []
    for given, options in spec.items():
        dimension = _dimension(given, full_key(given, keys), options)
        for value in dimension.extremes():
            if (reason := accepts(dimension.key, value)) is not None:
                raise SpaceError(f"space: {given}: the config refuses {value!r} ({reason})")
        dimensions.append(dimension)
    if len({dimension.key for dimension in dimensions}) < len(dimensions):
        raise SpaceError("space: a key is given twice (once with and once without `init_args`?)")
    return dimensions


def full_key(given: str, keys: list[str]) -> str:
    """``given`` as the parser spells it: ``init_args`` filled in; a class's ``.class_path`` names the class itself."""
    classes = {key.removesuffix(".class_path") for key in keys if key.endswith(".class_path")}
    known = [key for key in keys if not key.endswith(".class_path")] + sorted(classes)
    key = given.removesuffix(".class_path") if given.removesuffix(".class_path") in classes else given
    if key.startswith(RESERVED_KEYS):
        raise SpaceError(f"space: {given}: set by the search itself (each trial gets its own run directory)")
    if key in known:
        return key
    matches = [candidate for candidate in known if _short(candidate) == _short(key)]
    if len(matches) == 1:
        return matches[0]
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise SpaceError(f"space: {given}: no such config key{hint}")


def _dimension(given: str, key: str, options: Any) -> Dimension:
    kinds = [kind for kind in _OPTIONS if isinstance(options, Mapping) and kind in options]
    if len(kinds) != 1:
        raise SpaceError(f"space: {given}: give one of `float: [low, high]`, `int: [low, high]` or `choice: [...]`")
    (kind,) = kinds
    if unknown := sorted(set(options) - {kind} - _OPTIONS[kind]):
        raise SpaceError(f"space: {given}: unknown option {unknown[0]!r} ({kind} takes {sorted(_OPTIONS[kind])})")
    if kind == "choice":
        choices = options["choice"]
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"space: {given}: empty choice; list the values to try")
        return Dimension(key, kind, choices=tuple(choices))
    bounds, log, step = options[kind], bool(options.get("log", False)), options.get("step")
    number = int if kind == "int" else (int, float)
    if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is(value, number) for value in bounds)):
        raise SpaceError(f"space: {given}: {kind} needs [low, high] of {kind} numbers, got {bounds!r}")
    low, high = bounds
    if low > high:
        raise SpaceError(f"space: {given}: low {low} > high {high}")
    if low == high:
        raise SpaceError(f"space: {given}: empty range [{low}, {high}]")
    if log and low <= 0:
        raise SpaceError(f"space: {given}: a log scale needs low > 0, got {low}")
    if step is not None and (log or not _is(step, number) or step <= 0):
        raise SpaceError(f"space: {given}: step must be a positive {kind}, without log")
    return Dimension(key, kind, low=low, high=high, log=log, step=step)


def _is(value: Any, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def _short(key: str) -> str:
    return ".".join(part for part in key.split(".") if part != "init_args")


def _encode(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else json.dumps(value)
