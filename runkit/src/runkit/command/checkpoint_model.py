"""``validate``, ``test`` and ``predict`` with a checkpoint file evaluate the model the checkpoint holds: the model
settings the command gave that the checkpoint's replace are said in one line.

LightningCLI builds these commands' model from the checkpoint's hyperparameters (``FitKeepsItsModel`` in
``lightning_internals/``): a preset (``-c configs/example/groupnorm.yaml``) or a flag was dropped without a word.
The command goes on with the checkpoint's model rather than being refused: its weights were trained in that model
(another architecture would not load them), and settings that do not change what is evaluated (the optimizer, the
schedule, as stacked from training presets) should not stop an evaluation. Settings the command only inherits
from its starting configs are not named: they were not asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..run.resume_keys import flat


def replaced_settings(given: Any, loaded: Any, defaults: Any, skip: Iterable[str] = ()) -> list[str]:
    """``key old -> new`` for each model setting in ``given`` (differing from ``defaults``) that ``loaded`` replaces.

    A changed class is one entry (``model.class_path``); ``skip`` (link targets, filled in when objects are built)
    is not compared.
    """
    ours, theirs, default = (flat(_plain(spec), "model") for spec in (given, loaded, defaults))
    names = sorted(ours.keys() & theirs.keys())
    if ours.get("model.class_path") != theirs.get("model.class_path"):
        names = ["model.class_path"]
    skipped = set(skip)
    return [
        f"{name} {ours[name]!r} -> {theirs[name]!r}"
        for name in names
        if name not in skipped and ours[name] != theirs[name] and (name not in default or ours[name] != default[name])
    ]


def _plain(spec: Any) -> Any:
    """A config Namespace as dicts and lists (tuples as lists: a checkpoint's hyperparameters hold lists)."""
    spec = spec.as_dict() if hasattr(spec, "as_dict") else spec
    if isinstance(spec, dict):
        return {key: _plain(value) for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return [_plain(value) for value in spec]
    return spec


class SaysReplacedModel:
    """LightningCLI mixin: one line naming the command's model settings that the checkpoint's replace (see module)."""

    def model_replaced(self, subcommand: str, given: Any, loaded: Any) -> None:
        if _plain(given) == _plain(loaded):
            return
        defaults = self.subcommand_parser(subcommand).get_defaults().get("model")  # type: ignore[attr-defined]
        replaced = replaced_settings(given, loaded, defaults, self.project.links.values())  # type: ignore[attr-defined]
        if replaced:
            rank_zero_info(
                f"{subcommand}: the model is built with the checkpoint's settings (its weights were trained with them),"
                f" which replace this command's: {'; '.join(replaced)}"
            )
