"""Lightning's MLflow logger, one MLflow run per run folder, continued across resumes; a failing server
is reported once and training goes on."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ..credentials import masked

# The MLflow client's settings the kit changes; the environment still wins. The client retries a failed request
# for minutes (7 times, doubling from 2 s): a training job should not wait that long on a tracker. Its background
# logging sends each call as a request of its own (a logged step makes several); gathering 2 s of them into one
# takes its CPU per step from ~0.75 to ~0.1 ms against a server (bench/trackers.py), and each checkpoint still
# waits for all of it.
MLFLOW_CLIENT_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": "2",
}
MLFLOW_STATUS = {"finished": "FINISHED", "preempted": "KILLED", "interrupted": "KILLED"}  # else FAILED


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
        for name, value in MLFLOW_CLIENT_DEFAULTS.items():
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
    def flush(self) -> None:
        """Waits for what was logged in the background and checks the server still answers: with each checkpoint
        (``TrackedRun``), not in ``save``, which Lightning calls after every logged step."""
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
