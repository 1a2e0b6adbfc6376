"""One sweep cell in a worker: an Optuna trial of the grid (``GridSampler``), run as a ``fit`` in the cell's folder.

The search's worker takes the cells (``worker.run_worker``: storage, heartbeats, a dead worker's cell run again);
here is what differs from a search trial. The folder is named after the cell, not the trial, so a cell stopped by a
signal resumes from its ``last.ckpt`` when the sweep runs again, whichever trial runs it. A cell that fails (its
``fit`` refuses the config, the loss turns non-finite, the code raises) is a result, not the sweep's end: its trial
fails with its one error line, and the other cells go on.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import optuna
import torch
from optuna.samplers import GridSampler

from ..project import current
from . import storage as storages
from .grid import Axis, Cell, cell_name
from .monitor import TrialMonitor
from .report import counted
from .sweep_cli import SweepCLI, cell_arguments, fit_config
from .trial import TrialRefusedError, claim, fit_trial
from .worker import Plan, TrialInterruptedError, _fail_and_retry, _interruption, tell

CELL_CONFIG = "cell.yaml"
"""The cell's ``fit`` config in its folder, resolved once (see ``sweep_cli.py``)."""


@dataclass(frozen=True)
class SweepPlan(Plan):
    """A search plan whose trials are the grid's cells (picklable: spawned workers get it)."""

    axes: tuple[Axis, ...] = ()
    args: tuple[str, ...] = ()  # the sweep's command line, from which each cell's config is parsed

    @property
    def kind(self) -> str:
        return "sweep"

    def run_trial(self, study: optuna.Study, storage: optuna.storages.BaseStorage, trial: optuna.Trial) -> None:
        run_cell(self, study, storage, trial)

    def cell_of(self, params: dict[str, Any]) -> Cell:
        labels = tuple(str(params[axis.name]) for axis in self.axes)
        return Cell(tuple(zip((axis.name for axis in self.axes), labels, strict=True)), cell_name([*self.axes], labels))


class GridOfCells(GridSampler):
    """Optuna's ``GridSampler`` over the axes' labels (by name, for its class path in the plan's ``optuna_config``)."""

    def __init__(self, names: list[str], labels: list[list[str]]) -> None:
        """The grid.

        Args:
            names: Each axis's name (an Optuna parameter).
            labels: Each axis's labels, one per item.
        """
        super().__init__(dict(zip(names, labels, strict=True)))


class CellMonitor(TrialMonitor):
    """The search's trial monitor (the monitored metric's best value), keeping the final value of every metric."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.final: dict[str, float] = {}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        metrics = trainer.callback_metrics.items()
        self.final = {name: float(value) for name, value in metrics if torch.is_tensor(value) and value.numel() == 1}


def run_cell(plan: SweepPlan, study: optuna.Study, storage: optuna.storages.BaseStorage, trial: optuna.Trial) -> None:
    """Runs one cell and tells the study how it went; a signal's stop raises ``TrialInterruptedError``."""
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
    params = {axis.name: trial.suggest_categorical(axis.name, list(axis.labels)) for axis in plan.axes}
    cell = plan.cell_of(params)
    run_dir = plan.search_dir / cell.name
    monitor = CellMonitor(trial, plan.metric, plan.direction, params, dict(frozen.intermediate_values))
    trial.set_user_attr("cell", cell.name)
    trial.set_user_attr("error", None)  # a retry carries its failed trial's attributes
    trial.set_user_attr("torch_threads", torch.get_num_threads())
    error = None
    try:
        claim(run_dir, plan.study_uid)
        config = run_dir / CELL_CONFIG
        if not config.is_file():  # a resumed cell keeps the config it started with
            header = f"# The fit config of sweep cell {cell.name} (written by `{current().program} sweep`).\n"
            config.write_text(header + fit_config(_parser(plan), plan.project, _arguments(plan, params)))
        with storages.heartbeat(storage, trial._trial_id):
            fit_trial(config, [], run_dir, monitor, plan.project)
    except (SystemExit, KeyboardInterrupt) as stopped:
        if (code := _interruption(stopped, monitor)) is None:
            error = f"fit exited {getattr(stopped, 'code', stopped)!s}; see {run_dir / 'fit.log'}"
        else:
            _fail_and_retry(plan, study, storage, trial)
            print(f"cell {cell.name} stopped: saved in {run_dir}; it resumes when the sweep runs again", flush=True)
            raise TrialInterruptedError(code) from None
    except (TrialRefusedError, ValueError) as refused:  # a config fit refuses; a cell config that does not parse
        error = str(refused)
    except Exception as crashed:  # the cell's code raised (NonFiniteError included): its line, its traceback kept
        error = f"{type(crashed).__name__}: {(str(crashed).strip().splitlines() or [''])[0]}".rstrip(": ")
        if run_dir.is_dir():
            with open(run_dir / "fit.log", "a") as log:
                traceback.print_exc(file=log)
    if error is None and monitor.best is None:
        error = f"no validation logged the monitored metric {plan.metric!r}"
    if error is not None:
        trial.set_user_attr("error", error)
        tell(study, trial, state=optuna.trial.TrialState.FAIL)
    else:
        trial.set_user_attr("metrics", monitor.final)
        tell(study, trial, monitor.best)
    print(_progress(study, plan, cell, error), flush=True)


def _arguments(plan: SweepPlan, params: dict[str, Any]) -> list[str]:
    return cell_arguments(plan.axes, {name: str(label) for name, label in params.items()}, list(plan.args))


_parsers: dict[int, Any] = {}


def _parser(plan: SweepPlan) -> Any:
    """The sweep's parser, built once per worker process."""
    from ..command.cli import build_cli

    if id(plan) not in _parsers:
        _parsers[id(plan)] = build_cli(list(plan.args), run=False, cli_class=SweepCLI, project=plan.project).parser
    return _parsers[id(plan)]


def _progress(study: optuna.Study, plan: SweepPlan, cell: Cell, error: str | None) -> str:
    """``cell transformer,seed_everything=1 complete: val/acc=0.91 | 12.3 s | 3/4 done``."""
    trials = study.get_trials(deepcopy=False)
    done = sum(trial.state.is_finished() for trial in counted(trials))
    this = max((t for t in trials if t.user_attrs.get("cell") == cell.name), key=lambda t: t.number)
    seconds = (
        f"{(this.datetime_complete - this.datetime_start).total_seconds():.1f} s"
        if this.datetime_start and this.datetime_complete
        else "-"
    )
    outcome = f"failed: {error}" if error else f"complete: {plan.metric}={this.value:.6g}"
    return f"cell {cell.name} {outcome} | {seconds} | {done}/{plan.trials} done"
