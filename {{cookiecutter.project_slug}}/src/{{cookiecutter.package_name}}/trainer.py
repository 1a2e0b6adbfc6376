"""The Trainer with this project's extra subcommands: each public method here is ``<package> <method>``.

LightningCLI builds a subcommand's flags from the method's typed signature and docstring, exactly as
for ``fit``; ``model`` and ``datamodule`` come from the config. Keep each method a thin call into the
module that owns the feature.
"""

from __future__ import annotations

import lightning.pytorch as pl

# Subcommand name -> the method arguments that LightningCLI fills from the config, not from flags.
EXTRA_SUBCOMMANDS: dict[str, set[str]] = {}


class ProjectTrainer(pl.Trainer):
    """``lightning.pytorch.Trainer`` plus the methods listed in ``EXTRA_SUBCOMMANDS``."""
