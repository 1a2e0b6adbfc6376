"""A process of a multi-process run lost mid-run (killed, out of memory, its node gone): one line, not a traceback.

The others learn of it from their collective library (gloo: ``Connection reset by peer``; NCCL: a closed or aborted
communicator), as a ``RuntimeError`` with a stack of ~160 lines that never says which process went. Where this
process launched the others (Lightning's launcher: 2 processes on one machine), it asks them which one ended, and
how; under torchrun or SLURM it can only say that a peer went. The run's record says ``failed``; ``last.ckpt`` is as
the last save left it.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import lightning.pytorch as pl

from .checkpoints import checkpoint_dir

PEER_GONE = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|remote process exited|NCCL communicator was aborted|"
    r"Socket Timeout|Connection refused",
    re.IGNORECASE,
)
"""What gloo and NCCL say when a process of the group is gone."""


def exit_if_lost(trainer: pl.Trainer, error: BaseException, subcommand: str) -> None:
    """Exits 1 with one ``error:`` line when ``error`` means another process of the run was lost."""
    last = checkpoint_dir(trainer) / "last.ckpt" if subcommand == "fit" else None
    if lost := lost_process(trainer, error, last):
        sys.exit(f"error: {lost}")


def lost_process(trainer: pl.Trainer, error: BaseException, last: Path | None) -> str | None:
    """The ``error:`` line's text when ``error`` means another process of the run was lost, or ``None``."""
    if trainer.world_size < 2 or not isinstance(error, RuntimeError):
        return None
    ended = [
        (number, process.returncode)
        for number, process in enumerate(getattr(trainer.strategy.launcher, "procs", None) or [], start=1)
        if process.poll() is not None
    ]
    if not ended and not PEER_GONE.search(str(error)):
        return None
    if ended:
        number, code = ended[0]
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
        who = f"process {number} of {trainer.world_size} (local rank {number}) {how}"
    else:
        who = f"another process of the {trainer.world_size} went (killed, out of memory, or its node lost)"
    kept = (
        f"{last} is kept: continue with --ckpt_path last"
        if last is not None and last.is_file()
        else "no checkpoint had been saved yet"
    )
    return f"{who} at step {trainer.global_step}: the run stopped, its record says failed; {kept}"
