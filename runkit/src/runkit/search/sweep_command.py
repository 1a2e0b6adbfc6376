"""``<package> sweep``: every combination of presets and values (``--grid``), each an ordinary run, and one table.

    <package> sweep -c configs/debug/tiny.yaml --grid configs/example/model.yaml,configs/example/transformer.yaml \
        --grid seed_everything=1,2 --workers 2

Built on the search's machinery: the cells are the trials of an Optuna study whose sampler is the grid
(``GridSampler``), taken by the search's workers (``worker.py``: its storage, heartbeats and retries; ``launch.py``:
its processes). The sweep's folder is ``<trainer.default_root_dir>/<run.experiment>/<run.name or "sweep">/``: the
study's journal, ``base.yaml``, a run folder per cell named after it, and the results. The same command again skips
finished cells, resumes stopped ones from ``last.ckpt`` and runs failed ones again; another grid or config under the
same name is refused.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import optuna
import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from ..command.cli import build_cli
from ..project import Project, current
from ..run.folders import shell_command
from ..safety.monitor_mode import checked_mode
from ..store import is_remote
from . import storage as storages
from .cell import SweepPlan
from .grid import Axis, GridError, cells, count, is_key_axis, read_axes
from .launch import gpu_shares, run_workers, visible_gpus
from .results import cell_results, rows, table, write_results
from .space import RESERVED_KEYS, SpaceError, full_key
from .start import start_study
from .sweep_cli import SETTINGS, SweepCLI, SweepSettings, appended, cell_arguments, fit_words, parsed
from .tracking import study_run
from .worker import INTERRUPTED_EXIT_CODE, quiet, run_worker

FAILED_EXIT_CODE = 1
"""Every cell ran, and some failed (the table names each with its line)."""


def main(args: list[str], project: Project) -> None:
    """Runs ``sweep`` and exits: 0 every cell complete, 1 some failed, 2 bad input, 130 Ctrl-C, 143 SIGTERM."""
    quiet()
    args = appended([str(arg) for arg in args])
    cli = build_cli(args, run=False, cli_class=SweepCLI, project=project)
    config = cli.config
    try:
        settings = SweepSettings(**{name: config[name] for name in SETTINGS})
        plan = make_plan(cli.parser, config, settings, project, args)
        if settings.dry_run:
            _print_commands(plan, args)
            sys.exit(0)
        if settings.table:
            sys.exit(_show(plan))
        gpus = visible_gpus(config.trainer.accelerator) if settings.workers > 1 else []
        gpu_shares(gpus, settings.workers)  # fewer GPUs than workers: refused before any cell runs
        _check_folder(plan)
        base = _base_config(cli.parser, config)
        study, storage, plan = start_study(plan, base)  # type: ignore[assignment]
        parent = study_run(config, plan)  # the sweep's MLflow run, when the cells log to MLflow
    except ValueError as error:  # GridError included
        print(f"error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    plan.search_dir.mkdir(parents=True, exist_ok=True)
    plan.base_config.write_text(base)
    again = _retry_failed(plan, study, storage)
    where = storages.shown(plan.storage) if plan.storage else plan.search_dir / storages.JOURNAL
    print(
        f"sweep {plan.search_dir}: {plan.trials} cells ({' x '.join(str(len(a.labels)) for a in plan.axes)}),"
        f" {settings.workers} worker(s){f', {again} failed cell(s) run again' if again else ''}; {plan.metric}"
        f" ({plan.direction}); study in {where}",
        flush=True,
    )
    try:
        if not _left(study, plan):  # every cell complete: no worker to start (each would import torch to find none)
            code = 0
        elif settings.workers == 1:
            code = run_worker(plan, study, storage)
        else:
            code = run_workers(plan, settings.workers, gpus)
    except KeyboardInterrupt:
        code = INTERRUPTED_EXIT_CODE
    found = _report(plan, study)
    if parent is not None:
        parent.show_best(study, plan, finished=code == 0)
        for path in (plan.search_dir / name for name in ("results.csv", "results.md", "results.png")):
            if path.is_file():
                parent.client.log_artifact(parent.run_id, str(path))
        parent.leave()
    failed = any(result.state == "failed" for row in found for result in row.results)
    sys.exit(code or (FAILED_EXIT_CODE if failed else 0))


def make_plan(
    parser: LightningArgumentParser, config: Namespace, settings: SweepSettings, project: Project, args: list[str]
) -> SweepPlan:
    """Checks the grid (every file, key and value), the metric and the settings; writes nothing."""
    best = config.best_checkpoint.init_args if config.best_checkpoint else None
    monitor = (best.monitor or "val/loss") if best is not None else None
    metric, direction = settings.metric or monitor, settings.direction
    if metric is None:
        raise ValueError("--metric: name the logged metric to compare (best_checkpoint is off, so it names none)")
    if direction is None:
        if metric != monitor:
            raise ValueError(f"--direction: say `minimize` or `maximize` for --metric {metric}")
        direction = "maximize" if checked_mode(best.monitor, best.mode) == "max" else "minimize"
    if is_remote(config.trainer.default_root_dir):
        raise ValueError(
            f"trainer.default_root_dir: {config.trainer.default_root_dir}: a sweep keeps its study and its cells in"
            " a local folder (or one on a shared disk); give one"
        )
    if config.trainer.fast_dev_run:
        raise ValueError("trainer.fast_dev_run: a cell under it logs no metric; lower --trainer.max_epochs instead")
    axes = _checked_axes(parser, config, settings, project, args)
    if (total := count(axes)) > settings.max_cells:
        raise ValueError(
            f"--grid: {total} cells ({' x '.join(str(len(a.labels)) for a in axes)}) is more than --max_cells"
            f" {settings.max_cells}; give --max_cells {total} to run them all"
        )
    name = config.run.name or "sweep"
    search_dir = Path(config.trainer.default_root_dir or "runs") / config.run.experiment / name
    sampler = {"names": [a.name for a in axes], "labels": [list(a.labels) for a in axes]}
    return SweepPlan(
        study_name=name,
        storage=settings.storage,
        search_dir=search_dir,
        base_config=search_dir / "base.yaml",
        space=tuple(axes),  # the study's identity holds the axes, their files' contents included
        metric=metric,
        direction=direction,
        trials=total,
        heartbeat_interval=settings.heartbeat_interval,
        grace_period=settings.grace_period,
        optuna_config={
            "sampler": {"class_path": "runkit.search.cell.GridOfCells", "init_args": sampler},
            "pruner": {"class_path": "optuna.pruners.NopPruner"},
        },
        project=project,
        axes=tuple(axes),
        args=tuple(args),
    )


def _checked_axes(
    parser: LightningArgumentParser, config: Namespace, settings: SweepSettings, project: Project, args: list[str]
) -> list[Axis]:
    """The axes, each item checked by parsing the sweep's config with it: a file that does not parse, a key the
    config does not have (with the closest one), a value it refuses are one line naming the axis and the item."""
    keys = {key for key in config.keys() if key.split(".")[0] not in SETTINGS}  # noqa: SIM118 (flattened keys)
    grid = settings.grid
    if not grid:
        read_axes(grid, lambda key: key)  # raises: nothing to sweep
    given_groups = [entry for entry in grid if not is_key_axis(entry)]
    groups = read_axes(given_groups, lambda key: key) if given_groups else []
    contexts: list[tuple[list[str], set[str]]] = [([], keys)]
    for axis in groups:
        for label, item in zip(axis.labels, axis.items, strict=True):
            if item is None:
                continue
            words = axis.arguments(label)
            try:
                found = parsed(parser, project, [*words, *args])
            except ValueError as error:
                raise GridError(f"--grid {axis.given}: {item}: {error}") from None
            contexts.append((words, {key for key in found.keys() if key.split(".")[0] not in SETTINGS}))  # noqa: SIM118
    every = sorted(set().union(*(known for _, known in contexts)))

    def resolve(key: str) -> str:
        if key.startswith(RESERVED_KEYS):
            raise GridError(f"--grid {key}: set by the sweep itself (each cell gets its own run folder)")
        try:
            return full_key(key, every)
        except SpaceError as error:
            raise GridError(f"--grid {str(error).removeprefix('space: ')}") from None

    axes = read_axes(grid, resolve)  # in the grid's order, key axes resolved
    for axis in (axis for axis in axes if axis.key):
        words = next((w for w, known in contexts if axis.key in known or f"{axis.key}.class_path" in known), [])
        for label in axis.labels:
            try:
                parsed(parser, project, [*words, *args, *axis.arguments(label)])
            except ValueError as error:
                raise GridError(
                    f"--grid {axis.given}: {axis.key}={axis.items[axis.labels.index(label)]}: {error}"
                ) from None
    return axes


def _print_commands(plan: SweepPlan, args: list[str]) -> None:
    """``--dry_run true``: each cell's ``fit`` command, as one would type it (the cell's folder named)."""
    words = fit_words(args)
    print(f"sweep {plan.search_dir}: {plan.trials} cells; each runs:")
    for path in _sweep_files(words):
        print(
            f"note: {path} holds the sweep's own keys (grid, ...), which fit does not read: to paste a command,"
            " give it a copy of that file without them"
        )
    for cell in cells([*plan.axes]):
        arguments = cell_arguments(plan.axes, dict(cell.labels), words)
        folder = [f"--trainer.default_root_dir={plan.search_dir.parent}", f"--run.experiment={plan.search_dir.name}"]
        print(f"{cell.name}: {shell_command(current().program, 'fit', *arguments, *folder, f'--run.name={cell.name}')}")


def _sweep_files(words: list[str]) -> list[str]:
    """The ``-c`` files among ``words`` that hold the sweep's own keys."""
    found = []
    for index, word in enumerate(words):
        name, _, value = word.partition("=")
        if name in ("-c", "--config"):
            path = value or (words[index + 1] if index + 1 < len(words) else "")
            try:
                content = yaml.safe_load(Path(path).read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(content, dict) and set(content) & set(SETTINGS):
                found.append(path)
    return found


def _show(plan: SweepPlan) -> int:
    """``--table true``: the table of the sweep as it is now, and its results files. Exit 0, or 2 without one."""
    if not storages.study_exists(plan.storage, plan.search_dir, plan.study_name):
        raise ValueError(f"no sweep {plan.study_name!r} in {plan.search_dir} yet: run it without --table first")
    study, _ = plan.open_study()
    _report(plan, study)
    return 0


def _report(plan: SweepPlan, study: optuna.Study) -> list[Any]:
    found = rows(plan, cell_results(study, plan))
    print(table(plan, found), flush=True)
    written = write_results(plan, found)
    png = "" if any(path.suffix == ".png" for path in written) else " (results.png: pip install matplotlib)"
    print(f"results: {', '.join(str(path) for path in written)}{png}", flush=True)
    folder = plan.search_dir
    listing = shell_command(current().program, "runs", "--root", folder.parent, "--experiment", folder.name)
    print(f"the cells' runs: {listing}", flush=True)
    return found


def _check_folder(plan: SweepPlan) -> None:
    """A new sweep never takes over cell folders it finds (an earlier sweep's whose journal is gone)."""
    if storages.study_exists(plan.storage, plan.search_dir, plan.study_name):
        return
    found = sorted(cell.name for cell in cells([*plan.axes]) if (plan.search_dir / cell.name).exists())
    if found:
        raise ValueError(
            f"{plan.search_dir} holds cell folders of another sweep ({', '.join(found[:3])}"
            f"{', ...' if len(found) > 3 else ''}): give this sweep another --run.name, or move them away"
        )


def _retry_failed(plan: SweepPlan, study: optuna.Study, storage: optuna.storages.BaseStorage) -> int:
    """Queues again every cell that failed (the command runs again: its preset may be fixed); their number."""
    with storages.exclusive(storage, plan.study_name):
        trials = study.get_trials(deepcopy=False)
        retried = {number for trial in trials for number in trial.system_attrs.get("retry_history", [])}
        failed = [t for t in trials if t.state.name == "FAIL" and t.number not in retried and t.user_attrs.get("error")]
        for trial in failed:
            storages.retry(study, trial)
    return len(failed)


def _left(study: optuna.Study, plan: SweepPlan) -> bool:
    """Whether a cell is left to run: not started, queued, or running (on another worker, which may die)."""
    trials = study.get_trials(deepcopy=False)
    complete = {plan.cell_of(t.params).name for t in trials if t.state.name == "COMPLETE"}
    return len(complete) < plan.trials


def _base_config(parser: LightningArgumentParser, config: Namespace) -> str:
    """The sweep's ``fit`` config without its grid (``base.yaml``): what every cell shares."""
    fit = yaml.safe_load(parser.dump(config, skip_none=False, skip_validation=True))
    for key in (*SETTINGS, "config"):
        fit.pop(key, None)
    return "# The fit config every cell of this sweep shares (written by `sweep`).\n" + yaml.safe_dump(
        fit, sort_keys=False
    )
