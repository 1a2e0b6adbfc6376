"""The kit tests' command line: runkit's, with the fixture task's links, as a project's ``cli.py`` declares them.

The processes tests start run it as ``python -m fixture_cli`` (this folder is on their ``PYTHONPATH``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import runkit

LINKS = {  # the example project's: a model that does not take one gets neither the value nor the key in its checkpoint
    "data.num_classes": "model.init_args.num_classes",
    "data.input_shape": "model.init_args.input_shape",
}
PROJECT = runkit.Project(program="fixture_cli", links=LINKS)


def main(args: Sequence[Any] | None = None) -> None:
    runkit.main(args, PROJECT)


def build_cli(args: Sequence[Any] | None = None, run: bool = True) -> object:
    return runkit.build_cli(args, run=run, project=PROJECT)


if __name__ == "__main__":
    main()
