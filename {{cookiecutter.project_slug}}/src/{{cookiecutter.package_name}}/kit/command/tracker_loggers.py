"""Lightning's CSV, MLflow and W&B loggers, writing where the run is and continuing its record across resumes.

Each subclass changes only what Lightning's gets wrong for a run that is stopped and resumed (one line each,
on the class). Every one keeps ``logged_step``, the last step it logged: ``provenance.yaml`` records it with
each checkpoint, and a resume starts its trackers after it (see ``trackers.py``).
"""

from __future__ import annotations

import csv
import json
import os
import struct
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, WandbLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from .secrets import masked

# MLflow's client retries a failed request for minutes (7 times, doubling from 2 s); a training job should not
# wait that long on a tracker. The environment still wins.
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
MLFLOW_STATUS = {"finished": "FINISHED", "preempted": "KILLED", "interrupted": "KILLED"}  # else FAILED


class RunCSVLogger(CSVLogger):
    """``<run>/metrics.csv`` (and ``hparams.yaml``); a resume keeps the rows before ``purge_step`` and goes on.

    Lightning's deletes an existing ``metrics.csv`` when its folder holds anything: a resume would lose the rows.
    """

    def __init__(
        self, directory: Path, purge_step: int | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100
    ) -> None:
        file = directory / "metrics.csv"
        self._kept = _rows_before(file, purge_step) if purge_step is not None and file.is_file() else None
        super().__init__(
            save_dir=str(directory.parent.parent),
            name=directory.parent.name,
            version=directory.name,
            prefix=prefix,
            flush_logs_every_n_steps=flush_logs_every_n_steps,
        )
        self.logged_step = -1

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        with warnings.catch_warnings():  # the run folder holds config.yaml: not a sign of an old experiment
            warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
            writer = super().experiment
        if self._kept is not None:  # Lightning deleted the file: write back what the resumed run keeps
            kept, self._kept = self._kept, None
            for step, row in kept:
                writer.log_metrics(row, step)
            writer.save()
        return writer

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:  # type: ignore[override]
        super().log_metrics(metrics, step)
        if step is not None:
            self.logged_step = max(self.logged_step, int(step))


def _rows_before(file: Path, purge_step: int) -> list[tuple[int, dict[str, float | int]]]:
    with open(file, newline="") as handle:
        rows = list(csv.DictReader(handle))
    kept = []
    for row in rows:
        step = int(row.pop("step"))
        if step < purge_step:
            kept.append((step, {key: _number(value) for key, value in row.items() if value != ""}))
    return kept


def _number(text: str) -> float | int:
    try:
        return int(text)
    except ValueError:
        return float(text)


class RunMLFlowLogger(MLFlowLogger):
    """An MLflow run for a run folder: ``trainer.log_dir`` is the folder, a resume continues the same MLflow run.

    Lightning's takes MLflow's store for the run's folder, lets a failing server end the training, and a resume
    would log again the steps the stopped session logged after its checkpoint (MLflow cannot delete them).
    """

    def __init__(
        self,
        directory: Path,
        experiment_name: str,
        run_name: str,
        tracking_uri: str,
        run_id: str | None = None,
        tags: dict[str, Any] | None = None,
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        synchronous: bool | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        for name, value in MLFLOW_HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        super().__init__(
            experiment_name=experiment_name,
            run_name=run_name,
            tracking_uri=tracking_uri,
            tags=tags,
            log_model=log_model,
            prefix=prefix,
            artifact_location=artifact_location,
            run_id=run_id,
            synchronous=synchronous,
        )
        self.directory, self.on_lost, self.lost = directory, on_lost, None
        self.uri, self.metric_prefix = tracking_uri, prefix
        self.asynchronous = synchronous is False
        self.resumed = run_id is not None
        self.logged_step = -1
        self._skip: dict[str, int] | None = None  # per metric: the last step the MLflow run already has

    @property
    def save_dir(self) -> str:
        return str(self.directory)

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        self._guard(lambda: super(RunMLFlowLogger, self).log_hyperparams(params))

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if self.lost is not None:
            return
        if step is not None:
            if self._skip is None:
                self._skip = self._guard(self._logged_steps) or {}
            skip, start = self._skip, f"{self.metric_prefix}{self.LOGGER_JOIN_CHAR}" if self.metric_prefix else ""
            metrics = {key: value for key, value in metrics.items() if step > skip.get(f"{start}{key}", -1)}
            self.logged_step = max(self.logged_step, int(step))
        if metrics:
            self._guard(lambda: super(RunMLFlowLogger, self).log_metrics(metrics, step))

    def _logged_steps(self) -> dict[str, int]:
        """The last step of each metric the MLflow run holds (a stopped session may have logged past its checkpoint)."""
        if not self.resumed:
            return {}
        client, run_id = self.experiment, self.run_id
        keys = client.get_run(run_id).data.metrics
        return {key: max(point.step for point in client.get_metric_history(run_id, key)) for key in keys}

    @rank_zero_only
    def save(self) -> None:
        """Waits for what was logged in the background and checks the server still answers (with each checkpoint)."""
        if self.lost is None:
            self._guard(self._flush_and_check)

    def _flush_and_check(self) -> None:
        if self.asynchronous:
            import mlflow

            mlflow.flush_async_logging()
        self.experiment.get_run(self.run_id)

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if self.lost is None:
            self._guard(lambda: (self._flush_and_check(), super(RunMLFlowLogger, self).finalize(status)))

    def end(self, status: str, files: list[Path]) -> None:
        """Uploads the run's ``files`` and sets the MLflow run's status from the session's (``provenance.STATUSES``)."""
        if self.lost is not None:
            return

        def end() -> None:
            for file in files:
                if file.is_file():
                    self.experiment.log_artifact(self.run_id, str(file))
            self.experiment.set_tag(self.run_id, "kit.status", status)
            self.experiment.set_terminated(self.run_id, MLFLOW_STATUS.get(status, "FAILED"))

        self._guard(end)

    def _guard(self, call: Callable[[], Any]) -> Any:
        """Runs ``call``; if the tracking server fails, says so once and stops logging to it: training goes on."""
        try:
            return call()
        except Exception as error:  # the client's errors: connection, HTTP, MlflowException
            reason = masked(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
            self.lost = f"MLflow at {masked(self.uri)} failed after step {self.logged_step}: {reason[:300]}"
            print(f"warning: {self.lost}; training goes on without it", file=sys.stderr, flush=True)
            if self.on_lost is not None:
                self.on_lost(self.lost)
            return None


class RunWandbLogger(WandbLogger):
    """W&B files in ``<run>/wandb/``, one W&B run id per run folder; a resume skips the steps W&B already has.

    Lightning's would log again the steps the stopped session logged after its checkpoint (W&B cannot drop them).
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
    ) -> None:
        super().__init__(
            name=name,
            save_dir=str(directory),
            id=id,
            project=project,
            offline=offline,
            log_model=log_model,
            prefix=prefix,
            checkpoint_name=checkpoint_name,
            **(wandb_init or {}),  # the config's other `wandb.init` arguments (entity, tags, group, mode, ...)
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
