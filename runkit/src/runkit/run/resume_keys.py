"""What a resume may change: the Trainer and how the run is watched, not what its checkpoint holds.

``fit --ckpt_path last`` continues a run with the model its checkpoint holds. A command that asks for another
model (another class, another argument: ``-c configs/example/transformer.yaml`` on a ConvNet run, ``--model.dropout``)
or another data class is refused, naming the keys, before anything is written: LightningCLI would silently build
the checkpoint's model instead, or load weights into a model they were not trained in. Everything else may change
(``trainer.max_epochs``, ``limit_*_batches``, ``log_every_n_steps``, callbacks such as early stopping and their
patience, loggers, loader workers). To train another model from the checkpoint's weights, start a new run from it
(``--ckpt_path <run>/checkpoints/last.ckpt --run.name NEW``: the checkpoint's shapes must still fit).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def flat(value: Any, prefix: str) -> dict[str, Any]:
    """``{"model.init_args.network.init_args.dropout": 0.1, ...}`` for a class spec or a nested mapping."""
    if isinstance(value, dict):
        return {key: leaf for name, child in value.items() for key, leaf in flat(child, f"{prefix}.{name}").items()}
    return {prefix: value}


def as_spec(hparams: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's ``hyper_parameters`` (``_class_path`` and arguments, as LightningCLI saves them) as a spec."""
    arguments = {key: value for key, value in hparams.items() if not key.startswith("_")}
    return {"class_path": hparams.get("_class_path"), "init_args": arguments}


def changed_keys(
    key: str, command: dict[str, Any] | None, saved: dict[str, Any] | None, skip: Iterable[str]
) -> list[str]:
    """The keys under ``key`` whose value in the ``command``'s spec differs from the ``saved`` one, each with both.

    Only keys both name are compared (a checkpoint of an older run may lack some); ``skip`` (link targets, filled
    in when objects are built) is not.
    """
    if not command or not saved or not saved.get("class_path"):
        return []
    ours, theirs = flat(command, key), flat(saved, key)
    if ours.get(f"{key}.class_path") != theirs.get(f"{key}.class_path"):
        return [_changed(f"{key}.class_path", ours.get(f"{key}.class_path"), theirs.get(f"{key}.class_path"))]
    skipped = set(skip)
    return [
        _changed(name, ours[name], theirs[name])
        for name in sorted(ours.keys() & theirs.keys())
        if name not in skipped and not _same(ours[name], theirs[name])
    ]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _changed(name: str, ours: Any, theirs: Any) -> str:
    return f"{name} ({ours!r}; the checkpoint's: {theirs!r})"
