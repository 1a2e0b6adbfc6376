"""Lightning's W&B logger, its files in ``<run>/wandb/``, one W&B run id per run folder, continued across
resumes (the steps W&B already holds are read back from its offline files)."""

from __future__ import annotations

import json
import secrets
import string
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ..lightning_internals.tools import flat_hyperparameters


class RunWandbLogger(WandbLogger):
    """W&B files in ``<run>/wandb/``, one W&B run id per run folder; a resume skips the steps W&B already has; the
    W&B config holds the keys MLflow's parameters hold.

    Lightning's would log again the steps the stopped session logged after its checkpoint (W&B cannot drop them),
    and gives W&B only the module's hyperparameters, nested, where MLflow gets the run's resolved config too, flat.
    """

    def __init__(
        self,
        directory: Path,
        id: str,
        project: str,
        name: str,
        offline: bool = False,
        log_model: Literal["all"] | bool = False,
        prefix: str = "",
        checkpoint_name: str | None = None,
        wandb_init: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """``config``: the run's resolved config as flat parameters (``placement.config_params``), the W&B run's
        config from its start; a ``config`` in ``wandb_init`` (the logger's own) is laid over it."""
        wandb_init = dict(wandb_init or {})
        if config:
            wandb_init["config"] = {**config, **(wandb_init.get("config") or {})}
        super().__init__(
            name=name,
            save_dir=str(directory),
            id=id,
            project=project,
            offline=offline,
            log_model=log_model,
            prefix=prefix,
            checkpoint_name=checkpoint_name,
            **wandb_init,  # the config's other `wandb.init` arguments (entity, tags, group, mode, ...)
        )
        # Per metric, the last step the earlier sessions' offline files hold (what W&B has, even after a SIGKILL).
        self.skip = wandb_offline_steps(directory, id)
        self.logged_step, self.started, self.metric_prefix = -1, False, prefix

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        run = super().experiment
        self.started = True
        return run

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Any) -> None:
        """Flattened as MLflow's logger flattens them (``optimizer/init_args/lr``), where Lightning's W&B logger
        would keep them nested."""
        super().log_hyperparams(flat_hyperparameters(params))

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is not None:
            start = f"{self.metric_prefix}{self.LOGGER_JOIN_CHAR}" if self.metric_prefix else ""
            metrics = {key: value for key, value in metrics.items() if step > self.skip.get(f"{start}{key}", -1)}
            self.logged_step = max(self.logged_step, int(step))
        if metrics:
            super().log_metrics(metrics, step)

    def end(self, status: str, files: list[Path]) -> None:
        """Closes the W&B run with the session's exit code (0 finished, 143 preempted, 130 interrupted, else 1)."""
        codes = {"finished": 0, "preempted": 143, "interrupted": 130}
        if self.started:  # else no W&B run was made: nothing to close
            self.experiment.summary["kit/status"] = status
            self.experiment.finish(exit_code=codes.get(status, 1))


def wandb_offline_steps(directory: Path, run_id: str) -> dict[str, int]:
    """Per metric, the last ``trainer/global_step`` in the run's W&B offline files (``<run>/wandb/offline-run-*``)."""
    last: dict[str, int] = {}
    for file in sorted(directory.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")):
        for values in wandb_history(file):
            step = values.get("trainer/global_step")
            if isinstance(step, (int, float)):
                for key in values:
                    last[key] = max(last.get(key, -1), int(step))
    return last


def wandb_history(file: Path) -> list[dict[str, Any]]:
    """The history rows of a W&B transaction log (``.wandb``): W&B's protobuf records in LevelDB's log format
    (32 KiB blocks of records, each a CRC, a length, a type and data) after a 7-byte header. A file cut short
    (its process killed) gives the rows before the cut. W&B 0.31 has no Python reader of its own."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    blob, rows, pending, offset, block = file.read_bytes(), [], b"", 7, 32768
    while offset + 7 <= len(blob):
        if block - offset % block < 7:  # a block's trailer
            offset += block - offset % block
            continue
        _crc, length, kind = struct.unpack("<IHB", blob[offset : offset + 7])
        data, offset = blob[offset + 7 : offset + 7 + length], offset + 7 + length
        if kind == 0 or len(data) < length:  # padding, or the end of a file cut short
            break
        pending = data if kind in (1, 2) else pending + data  # FULL, FIRST; MIDDLE and LAST continue one
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(pending)
            except DecodeError:
                break
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return rows


def new_wandb_id() -> str:
    """A new W&B run id: 8 lowercase letters and digits, as W&B makes them."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))
