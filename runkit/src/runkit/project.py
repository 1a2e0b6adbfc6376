"""What a project tells the kit's command line: its name, its configs, its links, and the configs it starts from.

A project declares these in its own entry point (``src/<package>/cli.py``), not in the kit:

- ``program``: the command's name (the project's console script), as help, provenance and printed commands say it.
- ``configs``: the project's ``configs/`` folder (``configs_near(__file__)`` finds it beside the package in a wheel,
  or in the source tree); ``configs/default.yaml`` (kit and Trainer keys, no task values) comes first in every
  command. ``None``: no config but the command's own.
- ``links``: a datamodule attribute passed to a model argument when both are built (``data.num_classes`` ->
  ``model.init_args.num_classes``). A link reaches only a model whose signature takes that argument: for any
  other, the value is neither passed nor written into its checkpoint's hyperparameters.
- ``starting``: a config file per top-level key (``model``, ``data``) that every command starts from *unless the
  command names a class for that key itself* (``--model X``, ``--data.class_path X``, a ``-c`` file with
  ``model: {class_path: ...}``). The example's values live there, so a class swapped in gets its own defaults,
  not the example's (jsonargparse keeps the init args two classes share when a class path changes).

One project runs per process: ``current()`` is the one ``main`` or ``build_cli`` was given last.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CONFIG_ENV = "KIT_DEFAULT_CONFIG"
"""Environment variable naming the one config every command starts from (empty: none), in place of the project's
``configs/default.yaml`` and starting configs (the kit's own tests use it)."""

SUBCOMMANDS = ("fit", "validate", "test", "predict")  # sections a config file may nest its keys under


@dataclass(frozen=True)
class Project:
    """A project's declarations to the kit's command line (see the module)."""

    program: str = "runkit"
    configs: Path | None = None
    links: Mapping[str, str] = field(default_factory=dict)
    starting: Mapping[str, str] = field(default_factory=dict)  # key -> file, relative to `configs`

    def default_config_files(self, args: Sequence[str]) -> list[str]:
        """The configs a command with ``args`` starts from, in order (see the module)."""
        if (configured := os.environ.get(DEFAULT_CONFIG_ENV)) is not None:
            return [configured] if configured else []
        if self.configs is None or not (self.configs / "default.yaml").is_file():
            return []
        named = classes_named(args)
        starting = [str(self.configs / path) for key, path in self.starting.items() if key not in named]
        return [str(self.configs / "default.yaml"), *starting]

    @property
    def source(self) -> Path:
        """Where the project's code lives (whose git state a run records): the folder that holds ``configs/``, else
        the working directory."""
        return self.configs.parent if self.configs is not None else Path.cwd()


_current = Project()


def current() -> Project:
    """The project whose command runs in this process."""
    return _current


def make_current(project: Project) -> Project:
    """Makes ``project`` the one ``current()`` returns; returns it."""
    global _current
    _current = project
    return project


def configs_near(anchor: str | Path) -> Path | None:
    """The ``configs/`` of the project whose package holds ``anchor`` (its ``cli.py``): beside the package (a wheel
    carries it as ``<package>/configs``) or at the top of the source tree (``src/<package>/`` -> ``configs/``)."""
    package = Path(anchor).resolve().parent
    for folder in (package / "configs", package.parents[1] / "configs"):
        if (folder / "default.yaml").is_file():
            return folder
    return None


def classes_named(args: Sequence[str]) -> set[str]:
    """The top-level keys (``model``, ``data``) whose class the command names, by a flag or in a ``-c`` file."""
    named: set[str] = set()
    args = [str(arg) for arg in args]
    for index, arg in enumerate(args):
        flag, _, _ = arg.partition("=")
        for key in ("model", "data"):
            if flag in (f"--{key}", f"--{key}.class_path"):
                named.add(key)
        if flag in ("-c", "--config"):
            path = arg.partition("=")[2] if "=" in arg else (args[index + 1] if index + 1 < len(args) else "")
            named |= _named_in_file(path)
    return named


def _named_in_file(path: str) -> set[str]:
    try:
        content = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()  # the parser names the file and the problem
    sections = [content] if isinstance(content, dict) else []
    sections += [
        content[name] for name in SUBCOMMANDS if isinstance(content, dict) and isinstance(content.get(name), dict)
    ]
    named = set()
    for section in sections:
        for key in ("model", "data"):
            value = section.get(key, ...)
            if value is None or isinstance(value, str) or (isinstance(value, dict) and "class_path" in value):
                named.add(key)
    return named


def drop_unlanded_links(links: Mapping[str, str], built: Mapping[str, Any]) -> None:
    """Removes from each built object's hyperparameters the linked values its signature does not take.

    LightningCLI saves the hyperparameters of a module from the resolved config, where jsonargparse writes a link's
    value even when the target class has no such argument (and then, rightly, does not pass it): the checkpoint
    would carry an argument its class refuses when ``--ckpt_path`` rebuilds it from there.
    """
    for target in links.values():
        key, _, name = target.partition(".")
        name = name.removeprefix("init_args.")
        obj = built.get(key)
        hparams = getattr(obj, "hparams", None)
        if obj is None or hparams is None or "." in name or name not in hparams or accepts(type(obj), name):
            continue
        del hparams[name]


def accepts(cls: type, name: str) -> bool:
    """Whether ``cls(...)`` names an argument ``name`` (jsonargparse links only to named arguments)."""
    return name in inspect.signature(cls.__init__).parameters
