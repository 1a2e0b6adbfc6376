"""A model that starts training in eval mode, as every ``from_pretrained`` model does: said in one line of the kit's.

Lightning keeps each module's mode as ``fit`` finds it (it does not call ``train()``), so a network loaded with
Hugging Face's ``from_pretrained`` (which returns it in eval mode) trains the whole run with dropout off and its
batch norms on running statistics. Lightning says so in one warning among its start-up lines, which scrolls away
(issue 33). ``EvalModeAtStart`` says it in the kit's own line, with the count of modules and of those whose
behaviour the mode changes. A frozen part kept in eval mode on purpose is named the same way: the line says how
to keep it.
"""

from __future__ import annotations

from collections import Counter

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

MODE_DEPENDENT: tuple[type[nn.Module], ...] = (_DropoutNd, _BatchNorm, nn.InstanceNorm1d, nn.InstanceNorm2d)
"""Modules that compute differently in train and eval mode (torch's own; a model's own may too)."""


class EvalModeAtStart(Callback):
    """Says in one line how many of the model's modules are in eval mode as training starts (see the module)."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        modules = list(pl_module.modules())
        idle = [module for module in modules if not module.training]
        if not idle:
            return
        kinds = Counter(type(module).__name__ for module in idle if isinstance(module, MODE_DEPENDENT))
        named = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common(4))
        changes = f", {sum(kinds.values())} of them train differently so ({named})" if kinds else ""
        rank_zero_info(
            f"model: {len(idle)} of {len(modules)} modules are in eval mode as training starts{changes}: they stay"
            " so for the whole run (Lightning does not call train(); a from_pretrained model comes in eval mode)."
            " Call self.train() after loading it (in __init__ or setup) unless a frozen part is meant to stay so"
        )
