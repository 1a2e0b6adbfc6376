"""A run's first lines and its last: where it goes, and what came of it.

Before a run's first epoch Lightning says things about itself: an advertisement for its cloud logger, that it skipped
its own model summary (the kit gives one), that it loads the train loader early to count the steps, the TPU and HPU
it did not find, and, on newer torch, a deprecation inside its own code; on every resume it warns that the checkpoint
folder holds files (the run's own). ``quiet_lightning`` drops exactly those lines; whatever else Lightning says stays.
Its "Seed set to 42" goes too: the kit's first line names the run folder, and the seed with it (``run_line``).

``closing_block`` is what a ``fit`` prints last, however it ended: the run, its status, how far it went and how long
it took, the best checkpoint, and the commands to validate it, continue it, and look at its curves.
"""

from __future__ import annotations

import logging
import warnings
from datetime import datetime
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from ..run.folders import shell_command
from ..store import RunPath, location

QUIET_LINES = (
    "💡 Tip:",  # lightning 2.6: an advertisement for LitLogger, on every run
    "Trainer already configured with model summary callbacks",  # the kit's ModelSummary is the one
    "Loading `train_dataloader` to estimate number of stepping batches",  # how Lightning counts the run's steps
    "TPU available: False",
    "HPU available: False",
    "Seed set to",  # the kit's first line says it (run_line)
)
QUIET_WARNINGS = (
    r"Checkpoint directory .* exists and is not empty",  # a resume: the run's own checkpoints
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # lightning 2.6 on torch >= 2.10, inside Lightning
)
LOGGERS = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning.fabric.utilities.seed",
)
"""Where those lines are logged (``rank_zero_info`` and ``seed_everything``)."""


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).lstrip().startswith(QUIET_LINES)


def quiet_lightning() -> None:
    """Drops the lines of ``QUIET_LINES`` and the warnings of ``QUIET_WARNINGS`` in this process (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Quiet) for f in logger.filters):
            logger.addFilter(_Quiet())
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def run_line(directory: RunPath, how: str, seed: object) -> str:
    """The first line of a ``fit``: its run folder, how it starts (new, resumed from ...), and the seed; for a run in
    ``memory://`` (this process's own store: tests), that it is gone when the process ends."""
    line = f"Run {directory}: {how}{f', seed {seed}' if seed is not None else ''}"
    if str(directory).startswith("memory://"):
        line += "; memory:// is this process's own store: the run is gone when the process ends"
    return line


def closing_block(program: str, directory: RunPath, trainer: pl.Trainer, session: dict[str, Any]) -> str:
    """What a ``fit`` prints last (see the module); ``session`` is its record in ``provenance.yaml``."""
    status = session.get("status") or "ended"
    signal = f" by {session['signal']}" if session.get("signal") else ""
    took = _seconds(session.get("started"), session.get("ended"))
    lines = [
        f"Run {directory} {status}{signal}: epoch {trainer.current_epoch}, step {trainer.global_step}"
        + (f", {took:.1f} s" if took is not None else "")
    ]
    best = next((c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.monitor), None)
    if best is not None and best.best_model_score is not None and location(best.best_model_path).is_file():
        lines.append(f"  best {best.monitor} {float(best.best_model_score):.4g}: {best.best_model_path}")
    config = directory / "config.yaml"
    checkpoints = [name for name in ("best", "last") if (directory / "checkpoints" / f"{name}.ckpt").is_file()]
    if checkpoints:
        validate = shell_command(program, "validate", "-c", config, "--ckpt_path", checkpoints[0])
        lines.append(f"  validate:     {validate}")
    if "last" in checkpoints:
        more = "" if status != "finished" else " --trainer.max_epochs <more>"
        lines.append(f"  continue:     {shell_command(program, 'fit', '-c', config, '--ckpt_path', 'last')}{more}")
    lines.append(f"  TensorBoard:  {shell_command('tensorboard', '--logdir', directory)}")
    return "\n".join(lines)


def _seconds(started: object, ended: object) -> float | None:
    try:
        return (datetime.fromisoformat(str(ended)) - datetime.fromisoformat(str(started))).total_seconds()
    except ValueError:
        return None
