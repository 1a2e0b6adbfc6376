"""The loggers of a ``fit``: each configured one, rebuilt to write where the run is, its ids kept in provenance."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from ..credentials import masked
from ..project import current
from ..run.facts import git_state
from ..run.logger import RunLogger
from ..run.provenance import RunRecord
from ..run.session import RunSession
from .entries import LOCAL_STORE, class_of, configured_loggers, init_args
from .kinds import BUILT_IN, Placement, tracker_for

if TYPE_CHECKING:  # each imported where its tracker is placed: a fit without MLflow or W&B loads neither
    from .mlflow_logger import RunMLFlowLogger
    from .wandb_logger import RunWandbLogger


def for_session(session: RunSession, configured: Any, built: Any) -> list[Logger] | bool:
    """The loggers of the command ``session`` runs: none unless it writes a run (``RunSession.tracks``)."""
    if not session.tracks():
        return False
    return in_run(configured, built, session.directory, session.record, session.first_logged_step())


def in_run(
    configured: Any, built: Any, directory: Path, record: RunRecord | None, purge_step: int | None
) -> list[Logger] | bool:
    """The loggers of a ``fit`` that writes in ``directory``: each configured one, told where the run is.

    ``configured``: ``trainer.logger`` as configured (entries with ``class_path``); ``built``: the same,
    built. Nothing configured (``null``/``true``): TensorBoard. A logger no registered tracker places
    (``kinds.py``) is kept as built. ``record``: the run's provenance (``None``: a ``fit`` called in code), where
    tracker ids are kept. ``purge_step``: the first step a resumed session logs (``None``: a new run).
    """
    if configured is False:
        return False
    entries = configured_loggers(configured) or [None]
    built_list = configured_loggers(built) or [None]
    loggers: list[Logger] = []
    for entry, instance in zip(entries, built_list, strict=False):
        tracker = tracker_for(class_of(entry) if entry is not None else TensorBoardLogger)
        if tracker is None:
            loggers.append(instance)
            continue
        run = Placement(directory, record, record.tracker(tracker.name) if record is not None else {}, purge_step)
        loggers.append(tracker.place(init_args(entry), run))
    return loggers


class TensorBoardTracker:
    """Events in the run folder (``run/logger.py``)."""

    base, name = TensorBoardLogger, "tensorboard"

    def place(self, args: dict[str, Any], run: Placement) -> Logger:
        return RunLogger(run.directory, purge_step=run.purge_step)


class CSVTracker:
    """``<run>/metrics.csv`` (``csv_logger.py``)."""

    base, name = CSVLogger, "csv"

    def place(self, args: dict[str, Any], run: Placement) -> Logger:
        flush = args.get("flush_logs_every_n_steps", 100)
        from .csv_logger import RunCSVLogger  # a fit without a CSV logger loads none

        return RunCSVLogger(run.directory, run.purge_step, args.get("prefix", ""), flush)


class MLflowTracker:
    """A run named after the run folder, its config, git state, artifacts and status (``mlflow_logger.py``)."""

    base, name = MLFlowLogger, "mlflow"

    def place(self, args: dict[str, Any], run: Placement) -> Logger:
        return _mlflow(args, run.directory, run.record, run.known)


class WandbTracker:
    """Files in ``<run>/wandb/``, the config MLflow holds (``wandb_logger.py``)."""

    base, name = WandbLogger, "wandb"

    def place(self, args: dict[str, Any], run: Placement) -> Logger:
        return _wandb(args, run.directory, run.record, run.known)


BUILT_IN[:] = [TensorBoardTracker(), CSVTracker(), MLflowTracker(), WandbTracker()]


def _mlflow(args: dict[str, Any], directory: Path, record: RunRecord | None, known: dict[str, Any]) -> RunMLFlowLogger:
    from .mlflow_logger import RunMLFlowLogger

    uri = (
        args.get("tracking_uri") or f"file:{(directory.parent.parent / LOCAL_STORE).resolve()}"
    )  # see resolve_trackers
    experiment = args.get("experiment_name")
    if experiment in (
        None,
        "lightning_logs",
    ):  # a search's trial goes where its study's run is: MLflow nests runs of one experiment
        experiment = os.environ.get(PARENT_EXPERIMENT_ENV) or directory.parent.name
    logger = RunMLFlowLogger(
        directory,
        experiment_name=experiment,
        run_name=args.get("run_name") or directory.name,
        tracking_uri=uri,
        run_id=known.get("run_id") or args.get("run_id"),
        tags=args.get("tags"),
        log_model=args.get("log_model", False),
        prefix=args.get("prefix", ""),
        artifact_location=args.get("artifact_location"),
        synchronous=args.get("synchronous"),
        on_lost=None if record is None else lambda message: record.tracker_lost("mlflow", message),
    )
    if record is None or not record.writer:
        return logger
    client, run_id = logger.experiment, logger.run_id  # the MLflow run, created now: its id goes into provenance
    record.keep_tracker(
        "mlflow", {"run_id": run_id, "experiment_id": logger.experiment_id, "tracking_uri": masked(uri)}
    )
    tags = {"kit.run_dir": str(directory), "kit.experiment": directory.parent.name, "kit.run": directory.name}
    git = git_state(current().source)
    if git is not None:
        tags |= {"mlflow.source.git.commit": git["commit"], "kit.git.dirty": str(git["dirty"]).lower()}
    parent = os.environ.get(PARENT_RUN_ENV)
    if parent:
        tags["mlflow.parentRunId"] = parent
    if known.get("run_id"):
        client.update_run(run_id, status="RUNNING")  # a resumed session: the run goes on
    for key, value in tags.items():
        client.set_tag(run_id, key, value)
    config = directory / "config.yaml"
    if config.is_file():
        logger.log_hyperparams(config_params(yaml.safe_load(config.read_text()) or {}))
        client.log_artifact(run_id, str(config))
    record.on_end.append(lambda status: logger.end(status, [directory / "config.yaml", directory / "provenance.yaml"]))
    return logger


def _wandb(args: dict[str, Any], directory: Path, record: RunRecord | None, known: dict[str, Any]) -> RunWandbLogger:
    from .wandb_logger import RunWandbLogger, new_wandb_id

    run_id = known.get("id") or args.get("id") or args.get("version") or new_wandb_id()
    where = ("name", "save_dir", "dir", "version", "id", "project", "offline", "log_model", "prefix", "checkpoint_name")
    passed = {
        key: value
        for key, value in args.items()
        if key not in (*where, "anonymous", "experiment") and value is not None
    }
    writer, config = record is not None and record.writer, directory / "config.yaml"
    logger = RunWandbLogger(
        directory,
        id=run_id,
        project=args.get("project") or directory.parent.name,
        name=args.get("name") or directory.name,
        offline=bool(args.get("offline")),
        log_model=args.get("log_model", False),
        prefix=args.get("prefix", ""),
        checkpoint_name=args.get("checkpoint_name"),
        wandb_init=passed,
        config=config_params(yaml.safe_load(config.read_text()) or {}) if writer and config.is_file() else None,
    )
    if writer:
        record.keep_tracker("wandb", {"id": run_id, "project": logger.name})
        record.on_end.append(lambda status: logger.end(status, []))
    return logger


PARENT_RUN_ENV = "KIT_MLFLOW_PARENT_RUN_ID"
"""Set by ``search``: the MLflow run of the study, parent of each trial's run."""
PARENT_EXPERIMENT_ENV = "KIT_MLFLOW_PARENT_EXPERIMENT"
"""Set by ``search``: the MLflow experiment of the study's run, where each trial's run goes."""


def config_params(config: dict[str, Any]) -> dict[str, Any]:
    """The resolved config as tracker parameters: its leaves under dotted keys, unset top-level keys left out.

    Lightning logs the model's hparams under bare names (``optimizer``), and MLflow refuses a parameter logged
    twice with two values: a top-level ``optimizer: null`` would collide with them.
    """
    return flat({key: value for key, value in config.items() if value is not None})


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"model.init_args.lr": 0.01, "trainer.logger.0.class_path": ...}``: the config's leaves, dotted keys."""
    found: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            found.update(flat(value, f"{prefix}{key}."))
        elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
            found.update(flat(dict(enumerate(value)), f"{prefix}{key}."))
        else:
            found[f"{prefix}{key}"] = value
    return found
