"""Every subcommand of a project's command line, in one place: its name, the line ``--help`` shows for it, and the
module that runs it, imported only when that subcommand is called (as git's and pip's subcommands are).

Three kinds:

- ``lightning``: LightningCLI's own (``fit``, ``validate``, ``test``, ``predict``), run by ``command/cli.py``.
- ``trainer``: a Trainer method LightningCLI parses like ``fit`` (``export``, ``lr_find``, ...): ``runs`` names a
  function ``f(trainer, model, datamodule, ...)``, which becomes a method of the command's Trainer class
  (``command/trainer.py``); its other arguments are the subcommand's flags, except ``command`` (``CommandLine``).
- ``own``: a command with its own parser, called as ``function(argv, project)`` before any LightningCLI is built
  (``runs``, ``search``, ``sweep``).

Adding a subcommand is one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class CommandLine:
    """What a ``trainer`` subcommand that takes a ``command`` argument is given by the CLI (not a flag): the parser
    and the parsed config of the command line that runs it (the finders write a preset of one of its keys)."""

    parser: Any
    config: Any


TAKEN_FROM_THE_CONFIG = {"model", "datamodule", "command"}
"""A ``trainer`` subcommand's arguments that are not flags: the objects built from the config, and the command."""


@dataclass(frozen=True)
class Subcommand:
    """One subcommand: what runs it, and how its command line is parsed."""

    summary: str
    """One line for the top-level ``--help``."""
    kind: Literal["lightning", "trainer", "own"]
    runs: str = ""
    """``module:function`` under ``runkit`` (empty for LightningCLI's own)."""

    def function(self) -> Callable[..., Any]:
        """The function that runs the subcommand, imported now."""
        module, _, name = self.runs.partition(":")
        return getattr(importlib.import_module(f"runkit.{module}"), name)


SUBCOMMANDS: dict[str, Subcommand] = {
    "fit": Subcommand(
        "Trains a run: a new folder runs/<experiment>/<time>/, or the run it continues (--ckpt_path last).", "lightning"
    ),
    "validate": Subcommand("Scores a checkpoint on the validation data (a table; nothing is written).", "lightning"),
    "test": Subcommand("Scores a checkpoint on the test data (a table; nothing is written).", "lightning"),
    "predict": Subcommand(
        "Runs a checkpoint, or an export folder's recommended file, on inputs (the task's predict data).", "lightning"
    ),
    "schedule": Subcommand(
        "Prints the learning rate at key steps of the configured run, without training.",
        "trainer",
        "tools.schedule_preview:schedule",
    ),
    "export": Subcommand(
        "Exports a checkpoint (torch.export, ONNX) into its run's export/, checked against eager.",
        "trainer",
        "tools.export_command:export",
    ),
    "lr_find": Subcommand(
        "Runs Lightning's LR range test and writes the suggested LR as a preset.", "trainer", "tools.finders:lr_find"
    ),
    "batch_size_find": Subcommand(
        "Finds the largest batch size that fits in memory and writes it as a preset.",
        "trainer",
        "tools.finders:batch_size_find",
    ),
    "runs": Subcommand(
        "Lists the runs, each with its status and the command that continues it.", "own", "run.folders:main"
    ),
    "search": Subcommand(
        "Runs a hyperparameter search: many fit trials of one config, values chosen by Optuna.", "own", "search:main"
    ),
    "sweep": Subcommand(
        "Runs every combination of presets and values (--grid), each a run, and compares them in one table.",
        "own",
        "search.sweep:main",
    ),
}


def of_kind(*kinds: str) -> tuple[str, ...]:
    """The names of the subcommands of these kinds, in the registry's order."""
    return tuple(name for name, entry in SUBCOMMANDS.items() if entry.kind in kinds)
