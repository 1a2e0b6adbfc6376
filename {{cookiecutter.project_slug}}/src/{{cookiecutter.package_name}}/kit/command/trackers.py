"""Experiment trackers: any of Lightning's loggers, alone or several under ``trainer.logger``, keeps the run whole.

``configs/logger/`` has a preset per tracker (``tensorboard``, ``csv``, ``mlflow``, ``wandb``); each appends
its logger (``logger+:``), so they stack. Whatever a logger's config says about *where* it writes, the kit
decides it from the run, so checkpoints, ``config.yaml``, ``provenance.yaml`` and every tracker's files stay
in ``runs/<experiment>/<run>/``, and ``runs`` and ``--ckpt_path last|best`` work with any of them:

- TensorBoard: events in the run folder (``run_logger.RunLogger``); CSV: ``<run>/metrics.csv``;
- MLflow: a run named after the run folder, in the experiment ``run.experiment`` (unless ``experiment_name``
  is set), on ``tracking_uri`` (a server, ``sqlite:///...``) or, without one, the local store
  ``<trainer.default_root_dir>/mlruns``; the resolved config as parameters, the git commit and dirty flag as
  tags, ``config.yaml`` and ``provenance.yaml`` as artifacts, and the run's status at the end;
- W&B: files in ``<run>/wandb/``, the project ``run.experiment`` unless ``project`` is set.

The tracker ids (MLflow's run id, W&B's id) are kept in ``provenance.yaml`` under ``trackers``; a resume
(``--ckpt_path last``) continues the same tracked run, with each step logged once: TensorBoard and CSV drop
what the stopped session logged after its checkpoint, MLflow and W&B skip what they already hold. A tracker
whose package is missing, a tracking URL that cannot work, an artifact root that cannot be written or a
tracker id that belongs to another run stop the command before anything is written (exit 2); a tracking server
that fails mid-run is reported once and recorded, and training goes on.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import string
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import lightning.pytorch as pl
import yaml
from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from .bad_input import BadInputError
from .provenance import RunRecord, git_state, read_record
from .run_logger import RunLogger
from .runs import RunDirectory, plan_run
from .secrets import masked, move_url_credentials
from .task_checks import check_folder
from .tracker_loggers import MLFLOW_HTTP_DEFAULTS, RunCSVLogger, RunMLFlowLogger, RunWandbLogger

KEY = "trainer.logger"
EXTRAS = {MLFlowLogger: ("mlflow", "mlflow"), WandbLogger: ("wandb", "wandb")}  # class: (module, extra)
MLFLOW_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
LOCAL_STORE = "mlruns"  # MLflow's store without a server: <trainer.default_root_dir>/mlruns
ID_KEYS = {"mlflow": "run_id", "wandb": "id"}
# WandbLogger's arguments the kit sets (the others go to `wandb.init` as configured).
WANDB_SET = ("name", "save_dir", "dir", "version", "id", "project", "offline", "log_model", "prefix", "checkpoint_name")
WANDB_SET += ("anonymous", "experiment")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (a tracker's package), without importing it."""
    return importlib.util.find_spec(module) is not None


def configured_loggers(value: Any) -> list[Any]:
    """The entries of ``trainer.logger`` (a config entry, a list of them, or ``true``/``false``/``null``)."""
    if value is None or isinstance(value, bool):
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def class_of(entry: Any) -> type | None:
    """The logger class of a config entry (``class_path``) or of a built logger."""
    if isinstance(entry, Namespace) and isinstance(entry.get("class_path"), str):
        module, _, name = entry.class_path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return None
    return type(entry)


def _args(entry: Any) -> dict[str, Any]:
    init = entry.get("init_args") if isinstance(entry, Namespace) else None
    return init.as_dict() if isinstance(init, Namespace) else dict(init or {})


def resolve_trackers(trainer_config: Namespace) -> None:
    """Sets each MLflow logger's ``tracking_uri`` to the one it will use, without a password (moved to the
    environment, so that no file of the run holds it): as configured, else ``$MLFLOW_TRACKING_URI``, else the
    local store ``<trainer.default_root_dir>/mlruns``."""
    root = Path(trainer_config.get("default_root_dir") or "runs")
    for entry in configured_loggers(trainer_config.get("logger")):
        cls = class_of(entry)
        if cls is not None and issubclass(cls, MLFlowLogger) and isinstance(entry, Namespace):
            uri = tracking_uri(_args(entry))
            if uri is None:  # MLflow 3 refuses its file store unless asked; a client without a server needs it
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
                uri = f"file:{(root / LOCAL_STORE).resolve()}"
            user, password = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"
            entry.init_args.tracking_uri = move_url_credentials(uri, user, password)


def check_trackers(trainer_config: Namespace, run: Namespace, ckpt_path: str | None) -> None:
    """Refuses, before anything is built or written, a tracker that cannot work (raises ``BadInputError``)."""
    root = Path(trainer_config.get("default_root_dir") or "runs")
    for entry in configured_loggers(trainer_config.get("logger")):
        cls = class_of(entry)
        for base, (module, extra) in EXTRAS.items():
            if cls is not None and issubclass(cls, base) and not installed(module):
                raise BadInputError(
                    f"{KEY}: {base.__name__} needs the `{extra}` extra: pip install -e '.[{extra}]' (or pip install"
                    f" {'mlflow-skinny' if extra == 'mlflow' else extra})"
                )
        if cls is not None and issubclass(cls, MLFlowLogger):
            _check_mlflow(_args(entry), root)
        for name, base in (("mlflow", MLFlowLogger), ("wandb", WandbLogger)):
            if cls is not None and issubclass(cls, base) and _args(entry).get(ID_KEYS[name]):
                _check_id_is_this_runs(name, str(_args(entry)[ID_KEYS[name]]), root, run, ckpt_path)


def tracking_uri(args: dict[str, Any]) -> str | None:
    """The configured ``tracking_uri``, else ``$MLFLOW_TRACKING_URI`` (``None``: the local store)."""
    return args.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI") or None


def _check_mlflow(args: dict[str, Any], root: Path) -> None:
    uri = tracking_uri(args)
    if uri:
        scheme = urlsplit(uri).scheme.split("+")[0]
        if scheme not in MLFLOW_SCHEMES:
            raise BadInputError(
                f"{KEY}.init_args.tracking_uri: {masked(uri)!r} is no MLflow tracking URI; use http(s)://host:port"
                f" (a server), sqlite:///path/mlflow.db, or null (the local store {root / LOCAL_STORE})"
            )
    artifacts = args.get("artifact_location")
    if artifacts and "://" not in artifacts.replace("file://", "", 1):
        check_folder(f"{KEY}.init_args.artifact_location", artifacts.removeprefix("file://").removeprefix("file:"))
    if uri and urlsplit(uri).scheme in ("http", "https"):
        _check_server(uri, args.get("experiment_name") or "Default")


def _check_server(uri: str, experiment: str) -> None:
    for name, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    from mlflow import MlflowClient

    try:
        MlflowClient(uri).get_experiment_by_name(experiment)
    except Exception as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BadInputError(
            f"{KEY}.init_args.tracking_uri: cannot reach MLflow at {masked(uri)} ({masked(reason)[:200]})"
        ) from None


def _check_id_is_this_runs(tracker: str, tracker_id: str, root: Path, run: Namespace, ckpt_path: str | None) -> None:
    """A configured tracker id must not be another run's: two run folders would write into one tracked run."""
    try:
        plan = plan_run(RunDirectory(run.get("experiment") or "default", run.get("name")), root, True, ckpt_path, False)
    except ValueError:
        return  # the CLI reports it
    own = plan.directory.resolve() if plan.directory is not None and plan.resumed else None
    for record_file in sorted(root.glob("*/*/provenance.yaml")):
        other = record_file.parent
        recorded = ((read_record(other) or {}).get("trackers") or {}).get(tracker) or {}
        if recorded.get(ID_KEYS[tracker]) == tracker_id and other.resolve() != own:
            raise BadInputError(
                f"{KEY}.init_args.{ID_KEYS[tracker]}: {tracker_id!r} is the {tracker} run of {other}; resume that run"
                f" (fit -c {other / 'config.yaml'} --ckpt_path last) or leave {ID_KEYS[tracker]} null"
            )


def in_run(
    configured: Any, built: Any, directory: Path, record: RunRecord | None, purge_step: int | None
) -> list[Logger] | bool:
    """The loggers of a ``fit`` that writes in ``directory``: each configured one, told where the run is.

    ``configured``: ``trainer.logger`` as configured (entries with ``class_path``); ``built``: the same,
    built. Nothing configured (``null``/``true``): TensorBoard. A logger of another class is kept as built.
    ``record``: the run's provenance (``None``: a ``fit`` called in code), where tracker ids are kept.
    ``purge_step``: the first step a resumed session logs (``None``: a new run).
    """
    if configured is False:
        return False
    entries = configured_loggers(configured) or [None]
    built_list = configured_loggers(built) or [None]
    known = (record.data.get("trackers") if record is not None else None) or {}
    loggers: list[Logger] = []
    for entry, instance in zip(entries, built_list, strict=False):
        cls = class_of(entry) if entry is not None else TensorBoardLogger
        args = _args(entry)
        if cls is None or not issubclass(cls, (TensorBoardLogger, CSVLogger, MLFlowLogger, WandbLogger)):
            loggers.append(instance)
        elif issubclass(cls, TensorBoardLogger):
            loggers.append(RunLogger(directory, purge_step=purge_step))
        elif issubclass(cls, CSVLogger):
            flush = args.get("flush_logs_every_n_steps", 100)
            loggers.append(RunCSVLogger(directory, purge_step, args.get("prefix", ""), flush))
        elif issubclass(cls, MLFlowLogger):
            loggers.append(_mlflow(args, directory, record, known.get("mlflow") or {}))
        else:
            loggers.append(_wandb(args, directory, record, known.get("wandb") or {}))
    return loggers


def _mlflow(args: dict[str, Any], directory: Path, record: RunRecord | None, known: dict[str, Any]) -> RunMLFlowLogger:
    uri = (
        args.get("tracking_uri") or f"file:{(directory.parent.parent / LOCAL_STORE).resolve()}"
    )  # see resolve_trackers
    experiment = args.get("experiment_name")
    logger = RunMLFlowLogger(
        directory,
        experiment_name=directory.parent.name if experiment in (None, "lightning_logs") else experiment,
        run_name=args.get("run_name") or directory.name,
        tracking_uri=uri,
        run_id=known.get("run_id") or args.get("run_id"),
        tags=args.get("tags"),
        log_model=args.get("log_model", False),
        prefix=args.get("prefix", ""),
        artifact_location=args.get("artifact_location"),
        synchronous=args.get("synchronous"),
        on_lost=None if record is None else lambda message: _lost(record, "mlflow", message),
    )
    if record is None or not record.writer:
        return logger
    client, run_id = logger.experiment, logger.run_id  # the MLflow run, created now: its id goes into provenance
    record.data.setdefault("trackers", {})["mlflow"] = {
        "run_id": run_id,
        "experiment_id": logger.experiment_id,
        "tracking_uri": masked(uri),
    }
    tags = {"kit.run_dir": str(directory), "kit.experiment": directory.parent.name, "kit.run": directory.name}
    git = git_state(Path(__file__).resolve().parents[1])
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
        logger.log_hyperparams(flat(yaml.safe_load(config.read_text()) or {}))
        client.log_artifact(run_id, str(config))
    record.on_end.append(lambda status: logger.end(status, [directory / "config.yaml", directory / "provenance.yaml"]))
    return logger


def _wandb(args: dict[str, Any], directory: Path, record: RunRecord | None, known: dict[str, Any]) -> RunWandbLogger:
    run_id = known.get("id") or args.get("id") or args.get("version") or new_wandb_id()
    where = ("name", "save_dir", "dir", "version", "id", "project", "offline", "log_model", "prefix", "checkpoint_name")
    passed = {
        key: value
        for key, value in args.items()
        if key not in (*where, "anonymous", "experiment") and value is not None
    }
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
    )
    if record is not None and record.writer:
        record.data.setdefault("trackers", {})["wandb"] = {"id": run_id, "project": logger.name}
        record.on_end.append(lambda status: logger.end(status, []))
    return logger


PARENT_RUN_ENV = "KIT_MLFLOW_PARENT_RUN_ID"
"""Set by ``search``: the MLflow run of the study, parent of each trial's run."""


def new_wandb_id() -> str:
    """A new W&B run id: 8 lowercase letters and digits, as W&B makes them."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


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


def _lost(record: RunRecord, tracker: str, message: str) -> None:
    record.data.setdefault("trackers", {}).setdefault(tracker, {})["lost"] = message
    record.write()


class TrackedRun(Callback):
    """Checkpoints in ``<run>/checkpoints`` whatever the first logger is; every logger flushed with each checkpoint.

    Lightning puts a ``ModelCheckpoint`` without ``dirpath`` under the first logger's name and version (an MLflow
    experiment and run id, a W&B project and id); and what a checkpoint resumes from must be on disk with it.
    """

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(Path(trainer.default_root_dir) / "checkpoints")

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        for logger in trainer.loggers:
            logger.save()
