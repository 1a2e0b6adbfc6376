"""``<package> search``: parse the search's config, check it, start or join the study, run workers, print the table.

The command line is ``fit``'s (the default config first, then ``-c`` files and flags) plus the keys of
``SearchSettings``, so one YAML file can hold both what every trial changes (e.g. fewer epochs) and the space::

    <package> search -c configs/example/search.yaml --trials 20 --workers 2

The search directory is ``<trainer.default_root_dir>/<run.experiment>/<run.name or "search">/``: the study's
journal, ``base.yaml`` (the ``fit`` config every trial starts from), a ``trial-<n>/`` run per trial and
``best.yaml``. The same command run again continues the study; ``--run.name`` starts another. A study uses only the
trial folders it made (each holds ``study.yaml`` with the study's id).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any, Literal

import optuna
import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser
from optuna.pruners import BasePruner
from optuna.samplers import BaseSampler

from ..command.cli import ProjectCLI, build_cli
from ..project import Project, current
from ..safety.monitor_mode import checked_mode
from ..store import is_remote
from .launch import gpu_shares, run_workers, visible_gpus
from .report import ranked, table, write_best_preset
from .space import SpaceSpec, build_space, flag
from .start import start_study
from .storage import JOURNAL, shown
from .tracking import study_run
from .trial import trial_dir
from .worker import INTERRUPTED_EXIT_CODE, Plan, quiet, run_worker


class SearchSettings:
    """The search's own config keys; everything else on the command line is the ``fit`` config of every trial."""

    def __init__(
        self,
        space: SpaceSpec | None = None,
        trials: int = 20,
        workers: int = 1,
        storage: str | None = None,
        metric: str | None = None,
        direction: Literal["minimize", "maximize"] | None = None,
        sampler: BaseSampler | None = None,
        pruner: BasePruner | None = None,
        heartbeat_interval: int = 10,
        grace_period: int = 60,
    ) -> None:
        """Configures the search.

        Args:
            space: Config key -> ``{float: [low, high], log: bool, step: x}``, ``{int: [low, high], ...}`` or
                ``{choice: [value, ...]}`` (see ``kit/search/space.py``).
            trials: Trials the study runs in all (failed ones that are retried count once); rerun with more to extend.
            workers: Worker processes this command starts on this machine (more join with the same command).
            storage: ``null``: a journal file in the search directory (one machine), or give a journal file's path.
                A database URL such as ``postgresql://user:password@host:5432/db`` for workers on several machines.
            metric: The logged metric to optimize, its best value over the run; ``null``: ``best_checkpoint.monitor``.
            direction: ``minimize`` or ``maximize``; ``null``: from ``best_checkpoint.mode`` (for its metric).
            sampler: An Optuna sampler by class path; ``null``: TPE (``optuna.samplers.TPESampler``).
            pruner: An Optuna pruner by class path (``optuna.pruners.HyperbandPruner``); ``null``: median pruning;
                ``optuna.pruners.NopPruner`` runs every trial to the end.
            heartbeat_interval: Seconds between a running trial's heartbeats.
            grace_period: Seconds without a heartbeat after which a trial's worker is taken for dead and the trial
                is run again (a worker gone from this machine is noticed at once).
        """
        if trials < 1 or workers < 1:
            raise ValueError(f"--trials and --workers must be >= 1, got {trials} and {workers}")
        if heartbeat_interval < 1 or grace_period <= heartbeat_interval:
            raise ValueError(
                f"need 1 <= --heartbeat_interval < --grace_period, got {heartbeat_interval}, {grace_period}"
            )
        self.space, self.trials, self.workers, self.storage = space or {}, trials, workers, storage
        self.metric, self.direction = metric, direction
        # Kept as configured (class path and arguments): each worker process builds its own.
        self.sampler, self.pruner = sampler, pruner
        self.heartbeat_interval, self.grace_period = heartbeat_interval, grace_period


SETTINGS = tuple(inspect.signature(SearchSettings).parameters)


class SearchCLI(ProjectCLI):
    """Parses ``search``'s command line: the ``fit`` config plus ``SearchSettings``. Builds nothing."""

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        description = "Hyperparameter search: many `fit` trials of this config, chosen by Optuna."
        prog = f"{current().program} search"
        return super().init_parser(**{"prog": prog, "description": description, **kwargs})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_class_arguments(SearchSettings, None, as_group=True)

    def instantiate_classes(self) -> None:
        """Nothing: every trial builds its own model, data and trainer."""

    def after_instantiate_classes(self) -> None:
        """Nothing to check: each trial's ``fit`` checks its own objects."""


def main(args: list[str], project: Project) -> None:
    """Runs ``search`` and exits: 0 done, 2 bad config or space, 130 Ctrl-C, 143 SIGTERM (rerun to continue)."""
    quiet()
    cli = build_cli(args, run=False, cli_class=SearchCLI, project=project)
    try:
        plan = make_plan(cli.parser, cli.config, project)
        base = _fit_config(cli.parser, cli.config)
        gpus = visible_gpus(cli.config.trainer.accelerator) if cli.config.workers > 1 else []
        gpu_shares(gpus, cli.config.workers)  # fewer GPUs than workers: refused before anything is written
        study, storage, plan = start_study(plan, base)
        parent = study_run(cli.config, plan)  # the study's MLflow run, when the trials log to MLflow
    except ValueError as error:  # SpaceError included
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    plan.search_dir.mkdir(parents=True, exist_ok=True)
    plan.base_config.write_text(base)
    where, workers = shown(plan.storage) if plan.storage else plan.search_dir / JOURNAL, cli.config.workers
    print(
        f"search {plan.study_name}: {plan.trials} trials over {len(plan.space)} keys, {workers} worker(s);"
        f" {plan.metric} ({plan.direction}); study in {where}",
        flush=True,
    )
    try:
        code = run_worker(plan, study, storage) if workers == 1 else run_workers(plan, workers, gpus)
    except KeyboardInterrupt:
        code = INTERRUPTED_EXIT_CODE
    print(table(study, list(plan.space), plan.metric), flush=True)
    _write_best(plan, study, cli.parser)
    if parent is not None:
        parent.show_best(study, plan, finished=code == 0)
        parent.leave()
    sys.exit(code)


def make_plan(parser: LightningArgumentParser, config: Namespace, project: Project) -> Plan:
    """Checks the settings, the metric and every key and range of the space against the config; writes nothing."""
    settings = SearchSettings(**{name: config[name] for name in SETTINGS})
    best = config.best_checkpoint.init_args if config.best_checkpoint else None
    monitor = (best.monitor or "val/loss") if best is not None else None  # `best_checkpoint`'s, or the loss it follows
    metric, direction = settings.metric or monitor, settings.direction
    if metric is None:
        raise ValueError("--metric: name the logged metric to optimize (best_checkpoint is off, so it names none)")
    if is_remote(config.trainer.default_root_dir):  # its journal, trials' folders and reports are local files
        raise ValueError(
            f"trainer.default_root_dir: {config.trainer.default_root_dir}: a search keeps its study and its trials"
            " in a local folder; give one (a run of the best trial can then go to the store with fit)"
        )
    if config.trainer.fast_dev_run:  # Lightning logs no metric and saves no checkpoint under it
        raise ValueError(
            "trainer.fast_dev_run: a trial under it logs no metric to rank; for a quick search lower"
            " --trainer.max_epochs and --trainer.limit_train_batches instead"
        )
    if direction is None:
        if metric != monitor:
            raise ValueError(f"--direction: say `minimize` or `maximize` for --metric {metric}")
        direction = "maximize" if checked_mode(best.monitor, best.mode) == "max" else "minimize"  # best_checkpoint's
    fit_keys = [key for key in config.keys() if key.split(".")[0] not in SETTINGS]  # noqa: SIM118 (flattened keys)
    space = build_space(settings.space, fit_keys, lambda key, value: _refusal(parser, config, key, value))
    name = config.run.name or "search"
    search_dir = Path(config.trainer.default_root_dir or "runs") / config.run.experiment / name
    return Plan(
        study_name=name,
        storage=settings.storage,
        search_dir=search_dir,
        base_config=search_dir / "base.yaml",
        space=tuple(space),
        metric=metric,
        direction=direction,
        trials=settings.trials,
        heartbeat_interval=settings.heartbeat_interval,
        grace_period=settings.grace_period,
        optuna_config={"sampler": _plain(settings.sampler), "pruner": _plain(settings.pruner)},
        project=project,
    )


def _refusal(parser: LightningArgumentParser, config: Namespace, key: str, value: Any) -> str | None:
    """Why the config refuses ``--key=value`` (the last line of jsonargparse's message), or ``None``."""
    parser.exit_on_error = False
    try:
        parser.parse_args([flag(key, value)], namespace=config.clone())
    except Exception as error:  # jsonargparse's ArgumentError, with the reason on its last line
        return str(error).strip().splitlines()[-1].strip()
    finally:
        parser.exit_on_error = True
    return None


def _fit_config(parser: LightningArgumentParser, config: Namespace) -> str:
    """The resolved ``fit`` config (``base.yaml``), as a run's ``config.yaml`` holds it, without the search's keys."""
    fit = yaml.safe_load(parser.dump(config, skip_none=False, skip_validation=True))
    for key in (*SETTINGS, "config"):
        fit.pop(key, None)
    return "# The fit config every trial of this search starts from (written by `search`).\n" + yaml.safe_dump(
        fit, sort_keys=False
    )


def _write_best(plan: Plan, study: optuna.Study, parser: LightningArgumentParser) -> None:
    complete = [trial for trial in ranked(study) if trial.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        print("no complete trial yet: no best.yaml", flush=True)
        return
    best = complete[0]
    config = trial_dir(plan.search_dir, best.system_attrs.get("failed_trial", best.number)) / "config.yaml"
    if not config.is_file():  # run by a worker on another machine
        print(f"best trial {best.number}: its run directory is on the machine that ran it", flush=True)
        return
    default = _fit_defaults(parser, plan.project)
    threads = best.user_attrs.get("torch_threads")
    note = (
        f"Best of search {plan.search_dir}: trial {best.number}, {plan.metric} = {best.value:.6g} ({plan.direction}).\n"
        "What it changes from the default config. Train that trial again, bit for bit on this machine (its CPU\n"
        f"runs used {threads} torch thread(s)): OMP_NUM_THREADS={threads} {current().program} fit -c"
        f" {plan.search_dir / 'best.yaml'}"
    )
    path = write_best_preset(plan.search_dir / "best.yaml", config, default, note)
    print(f"best trial {best.number}: {plan.metric} = {best.value:.6g}; preset: {path}", flush=True)


def _fit_defaults(parser: LightningArgumentParser, project: Project) -> dict[str, Any]:
    """What ``fit -c best.yaml`` starts from: the project's default and starting configs, even where the search's
    own config named another class (parsed without them, a search of another model had no ``model``: exit 2 and no
    preset). A project that starts from no model: nothing, so the preset holds the whole trial's config."""
    parser.default_config_files = project.default_config_files([])
    parser.exit_on_error = False
    try:
        return yaml.safe_load(parser.dump(parser.parse_args([]), skip_none=False, skip_validation=True))
    except Exception:  # jsonargparse's ArgumentError: a required key (model) that no starting config sets
        return {}
    finally:
        parser.exit_on_error = True


def _plain(value: Any) -> Any:  # a sampler or pruner as given: a class path and its arguments
    return value.as_dict() if isinstance(value, Namespace) else value
