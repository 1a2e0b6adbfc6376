"""Before anything is built: each MLflow logger's tracking URI resolved (without its password), and every
tracker checked; one that cannot work stops the command (``BadInputError``: one ``error:`` line, exit 2)."""

from __future__ import annotations

import importlib.util
import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jsonargparse import Namespace
from lightning.pytorch.loggers import MLFlowLogger, WandbLogger

from ..bad_input import BadInputError
from ..credentials import masked, move_url_credentials
from ..project import current
from ..run.folders import RunDirectory, plan_run, shell_command
from ..run.records import read_record
from ..store import is_remote
from ..trackers.entries import LOCAL_STORE, class_of, configured_loggers, init_args, tracking_uri
from .task_checks import check_folder

KEY = "trainer.logger"
EXTRAS = {MLFlowLogger: ("mlflow", "mlflow"), WandbLogger: ("wandb", "wandb")}  # class: (module, extra)
MLFLOW_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
ID_KEYS = {"mlflow": "run_id", "wandb": "id"}
WANDB_NOT_ONLINE = ("offline", "disabled", "dryrun")  # W&B's modes that need no account
WANDB_HOST = "https://api.wandb.ai"  # W&B's server unless $WANDB_BASE_URL names another


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (a tracker's package), without importing it."""
    return importlib.util.find_spec(module) is not None


def resolve_trackers(trainer_config: Namespace) -> None:
    """Sets each MLflow logger's ``tracking_uri`` to the one it will use, without a password (moved to the
    environment, so that no file of the run holds it): as configured, else ``$MLFLOW_TRACKING_URI``, else the
    local store ``<trainer.default_root_dir>/mlruns``."""
    root = Path(trainer_config.get("default_root_dir") or "runs")
    for entry in configured_loggers(trainer_config.get("logger")):
        cls = class_of(entry)
        if cls is not None and issubclass(cls, MLFlowLogger) and isinstance(entry, Namespace):
            uri = tracking_uri(init_args(entry))
            if uri is None and is_remote(trainer_config.get("default_root_dir")):
                raise BadInputError(
                    f"{KEY}: MLFlowLogger without a tracking_uri keeps a local store in <trainer.default_root_dir>/"
                    f"{LOCAL_STORE}, and {trainer_config.get('default_root_dir')} is a store: give it a server"
                    " (tracking_uri, or $MLFLOW_TRACKING_URI)"
                )
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
            _check_mlflow(init_args(entry), root)
        if cls is not None and issubclass(cls, WandbLogger) and is_remote(trainer_config.get("default_root_dir")):
            raise BadInputError(
                f"{KEY}: WandbLogger writes its files into the run folder with local paths, and"
                f" {trainer_config.get('default_root_dir')} is a store: use TensorBoard or MLflow with a server there"
            )
        if cls is not None and issubclass(cls, WandbLogger) and wandb_online(init_args(entry)) and not wandb_key():
            # Else W&B asks for a key on a terminal, or fails with a traceback once training starts (no terminal).
            raise BadInputError(
                f"{KEY}: WandbLogger logs online (offline: false) and W&B finds no API key: set WANDB_API_KEY in the"
                " environment or run `wandb login` once; or keep offline: true and upload later with `wandb sync`"
            )
        for name, base in (("mlflow", MLFlowLogger), ("wandb", WandbLogger)):
            if cls is not None and issubclass(cls, base) and init_args(entry).get(ID_KEYS[name]):
                _check_id_is_this_runs(name, str(init_args(entry)[ID_KEYS[name]]), root, run, ckpt_path)


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
    from ..trackers.mlflow_logger import MLFLOW_CLIENT_DEFAULTS

    for name, value in MLFLOW_CLIENT_DEFAULTS.items():
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
                f" ({shell_command(current().program, 'fit', '-c', other / 'config.yaml', '--ckpt_path', 'last')}) or"
                f" leave {ID_KEYS[tracker]} null"
            )


def wandb_online(args: dict[str, Any]) -> bool:
    """Whether a ``WandbLogger`` with ``args`` logs to a W&B server: not ``offline``, and no W&B ``mode``
    (configured or ``$WANDB_MODE``) that needs no account."""
    modes = {str(args.get("mode") or "").lower(), os.environ.get("WANDB_MODE", "").lower()}
    disabled = os.environ.get("WANDB_DISABLED", "").lower() in ("1", "true")
    return not args.get("offline") and modes.isdisjoint(WANDB_NOT_ONLINE) and not disabled


def wandb_key() -> bool:
    """Whether W&B will find credentials without asking, where ``wandb.login`` looks (without importing W&B):
    ``$WANDB_API_KEY`` or ``$WANDB_IDENTITY_TOKEN_FILE``, the ``.netrc`` entry ``wandb login`` writes for the
    host, or an ``api_key`` in a W&B settings file."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or WANDB_HOST).netloc
    for file in (os.environ.get("NETRC"), "~/.netrc", "~/_netrc"):
        path = Path(file).expanduser() if file else None
        if path is not None and path.is_file():
            try:
                entries = netrc.netrc(path).hosts
            except (netrc.NetrcParseError, OSError):
                return True  # W&B warns about a file it cannot read; not ours to refuse
            if any(machine == host or "wandb" in machine for machine in entries):
                return True
            break  # W&B reads the first file found
    config_dir = Path(os.environ.get("WANDB_CONFIG_DIR") or "~/.config/wandb").expanduser()
    settings = [config_dir / "settings", Path("wandb") / "settings"]
    return any(path.is_file() and "api_key" in path.read_text(errors="replace") for path in settings)
