"""Which way a monitored metric is better, read from its name: lower for a loss or an error, higher for a score.

``BestCheckpoint`` (and ``search``, for its direction) take a metric's mode from its name, so that a command that names
another metric (``--best_checkpoint.monitor val/loss`` where a preset monitored ``val/acc``) never keeps the other
one's mode; ``mode`` is for a name that says neither, and one that contradicts the name is refused.
"""

from __future__ import annotations

import re
from typing import Literal

LOWER_IS_BETTER = frozenset(
    {"loss", "losses", "err", "error", "errors", "mse", "mae", "rmse", "nll", "ce", "bce", "kl", "perplexity", "ppl"}
    | {"wer", "cer", "fid"}
)
"""Words of a metric's name that say lower is better (a loss, an error)."""
HIGHER_IS_BETTER = frozenset(
    {"acc", "accuracy", "f1", "auroc", "auc", "ap", "map", "precision", "recall", "iou", "miou", "dice", "score"}
    | {"r2", "psnr", "ssim", "bleu", "rouge"}
)
"""Words of a metric's name that say higher is better (an accuracy, a score)."""


def metric_mode(monitor: str) -> Literal["min", "max"] | None:
    """``min`` for a metric whose name says lower is better (``val/loss``, ``val_error``), ``max`` for one that says
    higher is (``val/acc``, ``val/f1_macro``), ``None`` for one that says neither or both (``val/kappa``).

    The name's last part is read (Lightning's ``/dataloader_idx_N`` suffix left out), word by word.
    """
    name = without_loader(monitor).rsplit("/", 1)[-1].lower()
    words = set(re.findall(r"f1|r2|[a-z]+", name))
    lower, higher = bool(words & LOWER_IS_BETTER), bool(words & HIGHER_IS_BETTER)
    return "min" if lower and not higher else "max" if higher and not lower else None


def without_loader(name: str) -> str:
    """``name`` without the suffix Lightning adds for one validation loader of several (``/dataloader_idx_1``)."""
    return re.sub(r"/dataloader_idx_\d+$", "", name)


def checked_mode(monitor: str | None, mode: Literal["min", "max"] | None) -> Literal["min", "max"]:
    """The mode ``monitor`` is ranked by: ``mode`` if given, else the one its name says.

    Raises ``ValueError`` for a ``mode`` its name contradicts, for a name that says neither without ``mode``, and for
    ``max`` without a monitor (the validation loss is then followed: lower is better).
    """
    if monitor is None:
        if mode == "max":
            raise ValueError(
                "mode max with monitor null: best.ckpt then follows the validation loss, where lower is better;"
                " name the metric to maximize (--best_checkpoint.monitor val/acc), or drop mode"
                " (--best_checkpoint.mode null)"
            )
        return "min"
    named = metric_mode(monitor)
    if named is None and mode is None:
        raise ValueError(
            f"monitor {monitor!r}: its name does not say whether lower or higher is better: add"
            " --best_checkpoint.mode min or max"
        )
    if named is not None and mode is not None and mode != named:
        says = "lower (a loss or an error)" if named == "min" else "higher (an accuracy or a score)"
        raise ValueError(
            f"mode {mode} contradicts monitor {monitor!r}, whose name says {says} is better: drop mode (from the"
            f" config, or --best_checkpoint.mode null) and the name sets it"
        )
    return mode or named  # type: ignore[return-value]  # one of them is set here
