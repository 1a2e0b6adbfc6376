"""This project's command line: the kit's commands, with this project's links and starting configs.

Yours to edit when your task changes (the kit reads only what is declared here):

- ``LINKS``: a datamodule attribute passed to a model argument once both are built. A link reaches only a model
  whose constructor names that argument; for any other model it is skipped, and kept out of its checkpoint.
- ``STARTING``: the config file (under ``configs/``) that a top-level key starts from, unless a command names a
  class for that key itself (``--model my.Model``, or a ``-c`` file with ``model: {class_path: ...}``): then the
  named class gets its own defaults, not the example's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .kit.entry import Project
from .kit.entry import build_cli as kit_build_cli
from .kit.entry import main as kit_main

LINKS = {
    "data.num_classes": "model.init_args.num_classes",
    "data.input_shape": "model.init_args.input_shape",
}
STARTING = {"model": "example/model.yaml", "data": "example/data.yaml"}
PROJECT = Project(links=LINKS, starting=STARTING)


def main(args: Sequence[Any] | None = None) -> None:
    """The console script and ``python -m``: every subcommand, ``runs`` and ``search``."""
    kit_main(args, PROJECT)


def build_cli(args: Sequence[Any] | None = None, run: bool = True) -> object:
    """The command line's objects for ``args`` (``.model``, ``.datamodule``, ``.trainer``), run with ``run``."""
    return kit_build_cli(args, run=run, project=PROJECT)
