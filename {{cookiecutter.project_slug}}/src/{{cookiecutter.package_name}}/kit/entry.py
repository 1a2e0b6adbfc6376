"""The kit's entry point: ``runs`` and ``search`` first, then every LightningCLI subcommand (``command/cli.py``).

Exit codes, each failure with one ``error:`` line:

- 0: done.
- 1: training stopped: bad data, non-finite numbers, or a checkpoint that cannot be written (what was saved before
  is intact).
- 2: bad input: command line, config file, a value a class refuses, a task missing a method the subcommand needs,
  a checkpoint that cannot be used. Nothing is written (see ``command/bad_input.py``).
- 129, 130, 138, 143: stopped by SIGHUP, Ctrl-C, SIGUSR1 or SIGTERM (``safety/signals.py``); ``fit`` saved
  ``last.ckpt``: rerun with ``--ckpt_path last``.
"""

from __future__ import annotations

import sys

from jsonargparse import auto_cli
from lightning.pytorch.cli import ArgsType

from .command.cli import build_cli
from .command.project import DEFAULT_CONFIG_ENV, Project
from .command.runs import list_runs
from .safety.checkpoint_io import CheckpointWriteError
from .safety.data_checks import InvalidDataError
from .safety.nonfinite import NonFiniteError
from .safety.signals import INTERRUPTED_EXIT_CODE

__all__ = ["DEFAULT_CONFIG_ENV", "Project", "build_cli", "main"]
PROGRAM = __package__.split(".")[0]


def main(args: ArgsType = None, project: Project | None = None) -> None:
    """The command line: called by the project's entry point (``src/<package>/cli.py``) with its ``project``.

    ``runs`` (list the runs) is handled before LightningCLI: it needs no model, data or config. Neither is
    ``search``, which would otherwise build the model and data: it starts each trial as a ``fit`` from the
    config (``<package> search --help``; needs the ``search`` extra).
    """
    argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
    if argv[:1] == ["search"]:
        from .search import main as search

        search(argv[1:], project)
        return
    try:
        if argv[:1] == ["runs"]:
            auto_cli(list_runs, args=argv[1:], prog=f"{PROGRAM} runs")
            return
        build_cli(args, project=project)
    except (InvalidDataError, NonFiniteError, CheckpointWriteError) as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:  # before or after a subcommand runs (during one, it is `Interrupted`)
        sys.exit(INTERRUPTED_EXIT_CODE)
