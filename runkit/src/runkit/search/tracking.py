"""A search in MLflow: one parent run per study, each trial's run its child, the parent showing the best trial.

Only when the search's ``fit`` config logs to MLflow (``-c configs/logger/mlflow.yaml``). The parent run is in
the MLflow experiment ``run.experiment`` (or the logger's ``experiment_name``), found there by its study name, so
workers on several machines share it. Each trial's run goes into that experiment (MLflow nests runs of one
experiment only) with the ``mlflow.parentRunId`` tag: ``$KIT_MLFLOW_PARENT_EXPERIMENT`` and
``$KIT_MLFLOW_PARENT_RUN_ID``, which this module sets for the worker processes, tell the trials' loggers. When the
command ends, the parent holds the best complete trial's values as parameters, its metric, the trial number and
``best.yaml``, and the status FINISHED (KILLED when stopped early).
"""

from __future__ import annotations

import os

import optuna
from jsonargparse import Namespace
from lightning.pytorch.loggers import MLFlowLogger

from ..credentials import masked
from ..trackers.entries import class_of, configured_loggers
from ..trackers.placement import PARENT_EXPERIMENT_ENV, PARENT_RUN_ENV
from .report import ranked
from .worker import Plan

STUDY_TAG = "kit.search.study"


class StudyRun:
    """The study's parent run in MLflow."""

    def __init__(self, tracking_uri: str, experiment: str, study_name: str, kind: str = "search") -> None:
        from mlflow import MlflowClient

        self.client, self.uri = MlflowClient(tracking_uri), tracking_uri
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        tag = f"tags.`{STUDY_TAG}` = '{study_name}'"
        runs = self.client.search_runs([experiment_id], filter_string=tag, max_results=1)
        if runs:
            self.run_id = runs[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            tags = {STUDY_TAG: study_name, "mlflow.runName": f"{kind} {study_name}"}
            self.run_id = self.client.create_run(experiment_id, tags=tags).info.run_id

    def show_best(self, study: optuna.Study, plan: Plan, finished: bool) -> None:
        """The best complete trial's values, metric and number; ``best.yaml`` as an artifact; the run's status."""
        complete = [t for t in ranked(study) if t.state == optuna.trial.TrialState.COMPLETE]
        if complete:
            best, logged = complete[0], self.client.get_run(self.run_id).data.params
            for key, value in best.params.items():
                if key not in logged:  # MLflow sets a parameter once: a study continued later updates the tags
                    self.client.log_param(self.run_id, key, value)
                self.client.set_tag(self.run_id, f"kit.search.best.{key}", str(value))
            self.client.log_metric(self.run_id, plan.metric, best.value, step=len(complete))
            self.client.set_tag(self.run_id, "kit.search.best_trial", str(best.number))
            if (plan.search_dir / "best.yaml").is_file():
                self.client.log_artifact(self.run_id, str(plan.search_dir / "best.yaml"))
        self.client.set_terminated(self.run_id, "FINISHED" if finished else "KILLED")

    @staticmethod
    def leave() -> None:
        """Takes the study's run out of this process's environment (a search in a process that goes on: tests)."""
        for name in (PARENT_RUN_ENV, PARENT_EXPERIMENT_ENV):
            os.environ.pop(name, None)


def study_run(config: Namespace, plan: Plan) -> StudyRun | None:
    """The study's parent run when the trials log to MLflow (``None`` otherwise); its id goes to the workers."""
    for entry in configured_loggers(config.trainer.get("logger")):
        cls = class_of(entry)
        if cls is not None and issubclass(cls, MLFlowLogger) and isinstance(entry, Namespace):
            experiment = entry.init_args.get("experiment_name")
            if experiment in (None, "lightning_logs"):  # the kit's MLflow experiment: run.experiment
                experiment = config.run.experiment
            try:
                run = StudyRun(entry.init_args.tracking_uri, experiment, plan.study_name, plan.kind)
            except Exception as error:
                raise ValueError(
                    f"MLflow at {masked(entry.init_args.tracking_uri)}: {masked(str(error))[:200]}"
                ) from None
            os.environ[PARENT_RUN_ENV], os.environ[PARENT_EXPERIMENT_ENV] = run.run_id, experiment
            return run
    return None
