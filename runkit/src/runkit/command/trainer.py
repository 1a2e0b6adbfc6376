"""The command's Trainer class: ``lightning.pytorch.Trainer`` plus the one kit subcommand being run, if any.

LightningCLI parses a subcommand from a Trainer method's signature and docstring, exactly as for ``fit``. The kit's
subcommands are functions registered in ``subcommands.py`` (``export``, ``lr_find``, ...); only the one called is
imported and made a method, so ``fit`` loads none of them. The top-level ``--help`` lists every one.
"""

from __future__ import annotations

from collections.abc import Iterable

import lightning.pytorch as pl

from ..subcommands import SUBCOMMANDS, TAKEN_FROM_THE_CONFIG, of_kind


class ProjectTrainer(pl.Trainer):
    """``lightning.pytorch.Trainer``, the base of every command's Trainer class (see the module)."""


def trainer_class(names: Iterable[str]) -> type[ProjectTrainer]:
    """``ProjectTrainer`` with the registered ``trainer`` subcommands among ``names`` as methods."""
    methods = {name: SUBCOMMANDS[name].function() for name in names if name in of_kind("trainer")}
    return type("ProjectTrainer", (ProjectTrainer,), methods) if methods else ProjectTrainer


def trainer_subcommands() -> dict[str, set[str]]:
    """The kit's subcommands, each with the method arguments LightningCLI fills from the config, not from flags."""
    return {name: set(TAKEN_FROM_THE_CONFIG) for name in of_kind("trainer")}
