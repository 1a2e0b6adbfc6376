"""Checkpoint keys with and without ``torch.compile``'s ``_orig_mod.``: the same weights, in either form.

``torch.compile(net)`` returns a wrapper whose state_dict keys carry ``_orig_mod.`` (``net._orig_mod.0.weight``);
``nn.Module.compile`` (the kit's ``compile_in_place``) keeps the keys as they were. A module that compiles in
``setup`` (lightning-hydra-template's ``self.net = torch.compile(self.net)`` when fitting) writes checkpoints with
the prefix, which the model holds only once ``setup`` has run: the kit checks a checkpoint before that, and
``validate``, ``test`` and ``export`` build the model uncompiled. So keys are compared in their plain form
(``checkpoints.check_checkpoint``), and a model loads a checkpoint in the form it holds its keys when it loads
(``load_either_form``), as Lightning loads one after ``setup``.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

from torch import nn

COMPILED = "_orig_mod."
"""What ``torch.compile``'s wrapper adds to the keys of the module it wraps."""


def plain_key(key: str) -> str:
    """``key`` as an uncompiled model holds it: ``net._orig_mod.0.weight`` -> ``net.0.weight``."""
    return key.replace(COMPILED, "")


def load_either_form(module: nn.Module) -> None:
    """Makes ``module.load_state_dict`` take keys with or without ``_orig_mod.``, renamed to the ones it holds."""
    if not getattr(module, "_loads_either_form", False):
        module.register_load_state_dict_pre_hook(_as_held)
        module._loads_either_form = True  # once, however often the CLI hands it over


def _as_held(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    # Called by torch for the module loading (prefix "") before any of its parts: renamed here, each part loads its own.
    if prefix:
        return
    held = {name for name, _ in chain(module.named_parameters(remove_duplicate=False), module.named_buffers())}
    if not any(COMPILED in key for key in chain(held, state_dict)):
        return
    by_plain = {plain_key(name): name for name in held}
    for key in [key for key in state_dict if key not in held]:
        name = by_plain.get(plain_key(key))
        if name is not None and name not in state_dict:
            state_dict[name] = state_dict.pop(key)
