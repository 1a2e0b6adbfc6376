"""What a session records of where it ran: its seed, the time, the git commit and diff, versions, host and devices.

``provenance.py`` puts these into the run's record and into every checkpoint.
"""

from __future__ import annotations

import hashlib
import os
import platform
import secrets
import subprocess
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

PACKAGES = ("lightning", "torchmetrics", "jsonargparse")


JOB_IDS = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
"""Environment variables naming the job that started this process, the same in all of its processes."""


def drawn_seed() -> int:
    """The seed ``seed_everything: true`` asks for: drawn at random, and the same in every process of one run.

    Lightning 2.6's ``seed_everything(None)`` gives 0 (or ``$PL_GLOBAL_SEED``), whatever LightningCLI's help says
    ("a random seed"). A process that Lightning's launcher started has its parent's seed in ``$PL_GLOBAL_SEED``; the
    processes of a job a scheduler started (SLURM, torchrun) derive theirs from the job's id; otherwise it is new.
    """
    inherited = os.environ.get("PL_GLOBAL_SEED", "")
    if inherited.isdigit() and int(inherited) < 2**32:
        return int(inherited)
    job = next((os.environ[name] for name in JOB_IDS if os.environ.get(name)), None)
    if job is not None:
        return int.from_bytes(hashlib.sha256(job.encode()).digest()[:4], "big")
    return secrets.randbelow(2**32)


def now() -> str:
    """The local time with its UTC offset, to the millisecond (sorts runs started in the same second)."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def git_state(directory: Path) -> dict[str, Any] | None:
    """The commit of the git repository that holds ``directory``, whether tracked files differ from it, and the diff.

    ``None`` when ``directory`` is in no repository or git is not installed. Untracked files are not included.
    """

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=30)

    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return None
        diff = git("diff", "HEAD", "--no-color", "--no-ext-diff").stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(diff), "diff": diff}


def versions() -> dict[str, str | None]:
    """Versions of the interpreter and of the libraries that decide what a run computes."""
    found: dict[str, str | None] = {"python": platform.python_version(), "torch": str(torch.__version__)}
    found["cuda"] = torch.version.cuda
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def devices(trainer: pl.Trainer) -> dict[str, Any]:
    """The accelerator and devices of ``trainer``; device names once CUDA is initialised (never initialises it)."""
    found: dict[str, Any] = {
        "accelerator": type(trainer.accelerator).__name__.removesuffix("Accelerator").lower(),
        "devices": list(trainer.device_ids),
        "num_nodes": trainer.num_nodes,
        "world_size": trainer.world_size,
    }
    if trainer.strategy.root_device.type == "cuda" and torch.cuda.is_initialized():
        found["names"] = [torch.cuda.get_device_name(index) for index in trainer.device_ids]
    return found
