"""This project's command line: runkit's commands, with this project's name, configs, links and starting configs.

Yours to edit when your task changes (runkit reads only what is declared here):

- ``LINKS``: a datamodule attribute passed to a model argument once both are built. A link reaches only a model
  whose constructor names that argument; for any other model it is skipped, and kept out of its checkpoint.
- ``STARTING``: the config file (under ``configs/``) that a top-level key starts from, unless a command names a
  class for that key itself (``--model my.Model``, or a ``-c`` file with ``model: {class_path: ...}``): then the
  named class gets its own defaults, not the example's.
- ``PROJECT``: the command's name (this package, the console script) and the ``configs/`` every command starts
  from (``configs/default.yaml`` first): beside the package in a wheel, at the top of the source tree otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import runkit

LINKS = {
    "data.num_classes": "model.init_args.num_classes",
    "data.input_shape": "model.init_args.input_shape",
}
STARTING = {"model": "example/model.yaml", "data": "example/data.yaml"}
PROJECT = runkit.Project(
    program=__package__ or "main", configs=runkit.configs_near(__file__), links=LINKS, starting=STARTING
)


def main(args: Sequence[Any] | None = None) -> None:
    """The console script and ``python -m``: every subcommand, ``runs`` and ``search``."""
    runkit.main(args, PROJECT)


def build_cli(args: Sequence[Any] | None = None, run: bool = True) -> object:
    """The command line's objects for ``args`` (``.model``, ``.datamodule``, ``.trainer``), run with ``run``."""
    return runkit.build_cli(args, run=run, project=PROJECT)
