"""What a finder writes: the config key it sets, its answer as a preset of that one key, the command that uses it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import yaml
from jsonargparse import ArgumentParser, Namespace

from ..project import current
from ..run.folders import shell_command
from ..store import RunPath, StorePath
from ..subcommands import CommandLine


@dataclass(frozen=True)
class Found:
    """A finder's answer: the config key it sets, the value configured before, the value found, the preset file."""

    key: str
    configured: float | int
    value: float | int
    preset: RunPath


def command_config(trainer: pl.Trainer, command: CommandLine | None) -> tuple[ArgumentParser, Namespace]:
    """The parser and the parsed config of the running command, which the CLI passes to the finders (``command``).

    Under ``fast_dev_run`` Lightning skips the finders: exit 2.
    """
    if trainer.fast_dev_run:
        sys.stderr.write("error: the finders do not run with trainer.fast_dev_run (Lightning skips them): drop it\n")
        raise SystemExit(2)
    if command is None:
        raise RuntimeError("the finders run from the command line, which passes them its config")
    return command.parser, command.config


def config_key(config: Namespace, key: str | None, sections: tuple[str, ...], names: tuple[str, ...], flag: str) -> str:
    """The numeric config key a finder sets: ``key`` if given, else the one under ``sections`` named one of ``names``.

    Raises ``ValueError`` naming the flag when ``key`` holds no number, or when none or several keys match.
    """
    if key is None:
        under = tuple(f"{section}." for section in sections)
        matches = [k for k, _ in config.items() if k.startswith(under) and k.rsplit(".", 1)[-1] in names]
        if len(matches) != 1:
            found = f"found {', '.join(matches)}" if matches else f"none is named {' or '.join(names)}"
            where = " or ".join(f"`{section}`" for section in sections)
            raise ValueError(f"--{flag}: which key under {where} should the preset set? {found}; name it")
        key = matches[0]
    value = config.get(key) if key in config else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"--{flag} {key}: the config holds no number there ({value!r})")
    return key


def key_or_exit(
    parser: ArgumentParser,
    config: Namespace,
    key: str | None,
    sections: tuple[str, ...],
    names: tuple[str, ...],
    flag: str,
) -> str:
    try:
        return config_key(config, key, sections, names, flag)
    except ValueError as error:
        parser.error(str(error))  # one `error:` line, exit 2, nothing run or written


def refuse_existing(parser: ArgumentParser, paths: list[RunPath], overwrite: bool) -> None:
    """Exits 2 naming the first of ``paths`` that exists, unless ``overwrite``: a finder never replaces a file
    silently (a preset of the user's, an earlier answer)."""
    if overwrite:
        return
    if existing := next((path for path in paths if path.exists()), None):
        parser.error(f"output: {existing} exists: pass --overwrite true to replace it, or another --output")


def write_preset(found: Found, header: str, overwrite: bool = False) -> None:
    """Writes ``found.preset``: ``{key: value}`` as nested YAML (``a.b.c: v`` -> ``a: {b: {c: v}}``) under a comment.

    A file that exists is replaced only with ``overwrite`` (whole: written next to it, then renamed over it).
    """
    tree: Any = found.value
    for part in reversed(found.key.split(".")):
        tree = {part: tree}
    found.preset.parent.mkdir(parents=True, exist_ok=True)
    text = f"# Written by {header}.\n" + yaml.safe_dump(tree, sort_keys=False)
    if isinstance(found.preset, StorePath):  # one write (a conditional one, without overwrite): whole or absent
        if overwrite:
            found.preset.write_text(text)
            found.preset.with_suffix(".png").unlink(missing_ok=True)
        else:
            found.preset.create_new(text.encode())
        return
    if not overwrite:
        with open(found.preset, "x") as file:  # exists since the check: another process wrote it; it stays
            file.write(text)
        return
    partial = found.preset.with_name(f".{found.preset.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, found.preset)
    found.preset.with_suffix(".png").unlink(missing_ok=True)  # an earlier plot, which may not be replaced


def run_again(config: Namespace, preset: RunPath) -> str:
    """The command that trains with the preset: the config files this command was given, then the preset."""
    given = [str(path) for path in config.get("config") or []]
    return shell_command(current().program, "fit", *[word for path in given for word in ("-c", path)], "-c", preset)
