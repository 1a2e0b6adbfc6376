"""runkit's entry point, which a project's console script calls with its ``Project``: the subcommands with parsers
of their own (``runs``, ``search``) first, then every LightningCLI subcommand (``command/cli.py``); the list of
subcommands is ``subcommands.py``.

It imports torch and Lightning only for the commands that need them: ``runs``, a subcommand that does not exist
and a config file that is not there answer at once.

Exit codes, each failure with one ``error:`` line:

- 0: done.
- 1: training stopped: bad data, non-finite numbers, or a checkpoint that cannot be written (what was saved before
  is intact).
- 2: bad input: command line, config file, a value a class refuses, a task missing a method the subcommand needs,
  a checkpoint that cannot be used. Nothing is written (see ``bad_input.py``).
- 129, 130, 138, 143: stopped by SIGHUP, Ctrl-C, SIGUSR1 or SIGTERM (``safety/signals.py``); ``fit`` saved
  ``last.ckpt``: rerun with ``--ckpt_path last``.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .legacy import alias_old_kit
from .project import DEFAULT_CONFIG_ENV, Project, make_current
from .subcommands import SUBCOMMANDS

if TYPE_CHECKING:
    from .command.cli import ProjectCLI

__all__ = ["DEFAULT_CONFIG_ENV", "Project", "build_cli", "main"]


def main(args: Sequence[Any] | None = None, project: Project | None = None) -> None:
    """The command line: called by the project's entry point (``src/<package>/cli.py``) with its ``project``.

    A subcommand with a parser of its own (``runs``, ``search``: ``subcommands.py``) runs before any LightningCLI is
    built: ``runs`` needs no model, data or config, and ``search`` starts each trial as a ``fit`` of its own.
    """
    try:
        _main(args, project)
    except KeyboardInterrupt:  # Ctrl-C before a subcommand runs (torch and Lightning take seconds to import)
        print("interrupted (Ctrl-C) before the command started", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)


def _main(args: Sequence[Any] | None, project: Project | None) -> None:
    project = started(project)
    argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
    if problem := refused_at_once(argv):
        program = project.program
        print(f"usage: {program} <subcommand> [options] (see {program} --help)", file=sys.stderr)
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if argv and (entry := SUBCOMMANDS.get(argv[0])) is not None and entry.kind == "own":
        entry.function()(argv[1:], project)  # `runs`, `search`, ...: their own parsers, no LightningCLI
        return
    _run(argv if args is not None else None, project)


def started(project: Project | None) -> Project:
    """``project`` (or the bare default) made the process's current one, its old kit's class paths read as runkit's
    (runs made before the kit was a library name ``<package>.kit.X``)."""
    project = make_current(project or Project())
    alias_old_kit(project.program)
    return project


def refused_at_once(argv: list[str]) -> str | None:
    """What a command line gets wrong that needs no class to tell: an unknown subcommand, a missing config file."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    if argv and not argv[0].startswith("-") and first not in SUBCOMMANDS:
        close = [name for name in SUBCOMMANDS if name.startswith(first[:2])]
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        return f"no subcommand {first!r}: choose from {', '.join(SUBCOMMANDS)}{hint}"
    for index, arg in enumerate(argv):
        flag, _, value = arg.partition("=")
        if flag in ("-c", "--config"):
            path = value if "=" in arg else (argv[index + 1] if index + 1 < len(argv) else "")
            if path and not path.lstrip().startswith(("{", "[")) and (problem := _missing(path)):
                return problem
    return None


def _missing(path: str) -> str | None:
    """Why config file ``path`` cannot be read (it does not exist, or names a store not installed), or ``None``."""
    from .store import StoreError, location

    try:
        return None if location(path).exists() else f"config file {path} does not exist"
    except StoreError as error:
        return str(error)


def _run(args: list[str] | None, project: Project | None) -> None:
    from .command.cli import build_cli
    from .safety.checkpoint_io import CheckpointWriteError
    from .safety.data_checks import InvalidDataError
    from .safety.nonfinite import NonFiniteError

    try:
        build_cli(args, project=project)
    except (InvalidDataError, NonFiniteError, CheckpointWriteError) as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:  # after a subcommand ran (during one, it is `Interrupted`)
        sys.exit(128 + signal.SIGINT)


def build_cli(args: Sequence[Any] | None = None, run: bool = True, project: Project | None = None) -> ProjectCLI:
    """The command line's objects for ``args`` (see ``command/cli.py``), run with ``run``."""
    from .command.cli import build_cli as build

    project = started(project)
    return build(args, run=run, project=project)
