"""A search worker: takes the study's next trial, runs it as a ``fit``, tells Optuna how it went, until all are done.

Workers coordinate only through the study's storage, so a worker is the same on one machine or many. Every
trial counts toward ``trials`` once: a trial whose worker dies, is preempted (SIGTERM) or is interrupted (Ctrl-C)
is marked failed and its configuration queued again; the retry resumes from the failed run's ``last.ckpt``.

Exit codes: 0 done; 143 stopped by SIGTERM (the running trial saved; rerun to continue); 2 the searched metric
is never logged, or a trial's ``fit`` refused the config (its ``error:`` line is printed); 1 a trial's data is
invalid (the same for every trial).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import optuna
import torch
from jsonargparse import ArgumentParser
from lightning.pytorch.utilities.exceptions import SIGTERMException
from optuna.samplers import GridSampler
from optuna.trial import TrialState

from ..project import Project
from ..safety.data_checks import InvalidDataError
from ..safety.nonfinite import NonFiniteError
from ..safety.signals import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE, Interrupted
from . import storage as storages
from .monitor import MetricNotLoggedError, TrialMonitor
from .report import counted, progress_line
from .space import Dimension
from .trial import TrialRefusedError, claim, fit_trial, trial_dir


@dataclass(frozen=True)
class Plan:
    """Everything a worker needs to run a study's trials (picklable: spawned workers get it)."""

    study_name: str
    storage: str | None  # a database URL, a journal path, or null for the journal in `search_dir`
    search_dir: Path
    base_config: Path  # the `fit` config every trial starts from
    space: tuple[Dimension, ...]
    metric: str
    direction: Literal["minimize", "maximize"]
    trials: int
    heartbeat_interval: int
    grace_period: int
    optuna_config: dict[str, Any]  # `sampler` and `pruner` as given (class paths), built in each worker
    project: Project  # the project's links and starting configs, for each trial's `fit`
    study_uid: str = ""  # the study's own id (its `uid` attribute), marked in each trial folder it makes

    def open_study(self) -> tuple[optuna.Study, optuna.storages.BaseStorage]:
        """The study (created by the first worker to get here) with this worker's own sampler and pruner."""
        storage = storages.open_storage(self.storage, self.search_dir, self.heartbeat_interval, self.grace_period)
        parser = ArgumentParser(exit_on_error=False)
        parser.add_argument("--sampler", type=optuna.samplers.BaseSampler | None, default=None)
        parser.add_argument("--pruner", type=optuna.pruners.BasePruner | None, default=None)
        built = parser.instantiate(parser.parse_object(self.optuna_config))  # null: TPE, median pruning
        study = optuna.create_study(
            storage=storage,
            study_name=self.study_name,
            direction=self.direction,
            sampler=built.sampler,
            pruner=built.pruner,
            load_if_exists=True,
        )
        return study, storage

    @property
    def kind(self) -> str:
        """What runs the study's trials, as its MLflow run's name says: ``search`` (or ``sweep``)."""
        return "search"

    def run_trial(self, study: optuna.Study, storage: optuna.storages.BaseStorage, trial: optuna.Trial) -> None:
        """Runs one trial and tells the study how it went (a sweep's plan runs a cell instead)."""
        _run(self, study, storage, trial)


class TrialInterruptedError(Exception):
    """The running trial was stopped by a signal; it has been queued again. ``code``: the exit code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _StopRequest:
    """SIGTERM between trials: finish the current step of work, then exit 143. (In ``fit``, Preemption saves first.)"""

    def __init__(self) -> None:
        self.requested = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested.set()


def quiet() -> None:
    """One line per trial: Optuna's log lines off, and warnings about what the search does on purpose."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeats and retries
    # Asking and telling outside `Study.optimize` (see `_next_trial`); trials pass their flags as LightningCLI `args`.
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")


def spawned_worker(plan: Plan, cpus: list[int]) -> None:
    """A worker process started by ``--workers N``, on its share ``cpus`` of the machine's CPUs (empty: all).

    Pinned, with as many torch threads as CPUs, N workers do not oversubscribe the machine, and a datamodule
    that sizes its loader workers by ``os.sched_getaffinity`` sees its share. Its GPUs, if any, came in its
    environment (``CUDA_VISIBLE_DEVICES``, see ``launch.py``). Ctrl-C reaches it as SIGTERM.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet()
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(len(cpus))
    sys.exit(run_worker(plan, *plan.open_study()))


def run_worker(plan: Plan, study: optuna.Study, storage: optuna.storages.BaseStorage) -> int:
    """Runs trials until the study has ``plan.trials`` of them; returns the exit code."""
    stop = _StopRequest()
    previous = signal.signal(signal.SIGTERM, stop)  # Lightning chains it into its own handler during `fit`
    try:
        while not stop.requested.is_set():
            trial = _next_trial(plan, study, storage, stop)
            if trial is None:
                return 0
            try:
                plan.run_trial(study, storage, trial)
            except TrialInterruptedError as interrupted:
                return interrupted.code
            except (MetricNotLoggedError, TrialRefusedError) as error:
                print(f"error: {error}", file=sys.stderr, flush=True)
                return 2
            except InvalidDataError as error:
                print(f"error: {error}", file=sys.stderr, flush=True)
                return 1
        return PREEMPTED_EXIT_CODE
    finally:
        signal.signal(signal.SIGTERM, previous)


def _next_trial(
    plan: Plan, study: optuna.Study, storage: optuna.storages.BaseStorage, stop: _StopRequest
) -> optuna.Trial | None:
    """The next trial to run (a queued retry first), or ``None`` when every counted trial is finished.

    While the budget is taken but other workers' trials still run, waits: one of them may die and need a retry.
    """
    while not stop.requested.is_set():
        with storages.exclusive(storage, plan.study_name):
            optuna.storages.fail_stale_trials(study)  # marks dead workers' trials failed and queues them again
            trials = counted(study.get_trials(deepcopy=False))
            waiting = any(trial.state == TrialState.WAITING for trial in trials)
            exhausted = isinstance(study.sampler, GridSampler) and study.sampler.is_exhausted(study)
            if waiting or (len(trials) < plan.trials and not exhausted):  # a grid's every point tried: done
                trial = study.ask()
                storage.record_heartbeat(trial._trial_id)  # type: ignore[attr-defined]  # owner and time, at once
                return trial
        if not any(trial.state == TrialState.RUNNING for trial in trials):
            return None
        stop.requested.wait(min(plan.heartbeat_interval, 5))
    return None


def _run(plan: Plan, study: optuna.Study, storage: optuna.storages.BaseStorage, trial: optuna.Trial) -> None:
    """Runs one trial and tells the study its outcome; raises what ends the worker."""
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
    retry_of = frozen.system_attrs.get("failed_trial")
    values = {dimension.key: dimension.suggest(trial) for dimension in plan.space}
    monitor = TrialMonitor(trial, plan.metric, plan.direction, values, dict(frozen.intermediate_values))
    run_dir = trial_dir(plan.search_dir, trial.number if retry_of is None else retry_of)
    trial.set_user_attr("torch_threads", torch.get_num_threads())  # float sums, and so results, depend on it
    try:
        flags = [dimension.flag(values[dimension.key]) for dimension in plan.space]
        claim(run_dir, plan.study_uid)
        with storages.heartbeat(storage, trial._trial_id):
            fit_trial(plan.base_config, flags, run_dir, monitor, plan.project)
    except NonFiniteError as error:  # this configuration diverges: a result, not a fault of the search
        tell(study, trial, state=TrialState.FAIL)
        print(f"trial {trial.number}: {error}", flush=True)
    except TrialRefusedError:
        with storages.exclusive(storage, plan.study_name):  # the config, not this trial: it is not counted
            tell(study, trial, state=TrialState.FAIL)
            storages.retry(study, next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number))
        raise
    except (SystemExit, KeyboardInterrupt) as stopped:
        if (code := _interruption(stopped, monitor)) is None:
            tell(study, trial, state=TrialState.FAIL)
            raise
        _fail_and_retry(plan, study, storage, trial)
        print(f"trial {trial.number} stopped: saved in {run_dir}; it resumes when the search runs again", flush=True)
        raise TrialInterruptedError(code) from None
    except BaseException:
        tell(study, trial, state=TrialState.FAIL)  # whatever ends this worker, the trial is not left running
        raise
    else:
        if monitor.best is None:
            tell(study, trial, state=TrialState.FAIL)
            raise MetricNotLoggedError(f"no validation logged the searched metric {plan.metric!r}")
        if monitor.pruned:
            tell(study, trial, state=TrialState.PRUNED)
        else:
            tell(study, trial, monitor.best)
    finished = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
    print(progress_line(study, finished, list(plan.space), plan.metric, plan.trials), flush=True)


def tell(
    study: optuna.Study, trial: optuna.Trial, values: float | None = None, state: TrialState | None = None
) -> None:
    """``study.tell``, for a sampler that ends the study when told its last trial: Optuna's ``GridSampler`` calls
    ``Study.stop``, which raises outside ``optimize`` (this search asks and tells). Optuna stores the trial first."""
    try:
        study.tell(trial, values, state=state)
    except RuntimeError as error:
        if "Study.stop" not in str(error):
            raise


def _interruption(stopped: BaseException, monitor: TrialMonitor) -> int | None:
    """The exit code when a signal stopped the trial (reported as ``SystemExit``), else ``None``.

    The kit's ``Preemption`` stops on SIGTERM (143) and Ctrl-C (130) alike and sets the code on Lightning's
    ``SIGTERMException``; a second Ctrl-C raises ``Interrupted`` (130) at once.
    """
    if isinstance(stopped, (KeyboardInterrupt, Interrupted)) or isinstance(monitor.exception, KeyboardInterrupt):
        return INTERRUPTED_EXIT_CODE
    if isinstance(monitor.exception, SIGTERMException):
        return int(monitor.exception.code or PREEMPTED_EXIT_CODE)
    return None


def _fail_and_retry(plan: Plan, study: optuna.Study, storage: optuna.storages.BaseStorage, trial: optuna.Trial) -> None:
    with storages.exclusive(storage, plan.study_name):
        tell(study, trial, state=TrialState.FAIL)
        storages.retry(study, next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number))
