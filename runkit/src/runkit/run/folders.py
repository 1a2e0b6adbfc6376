"""Run directories: every ``fit`` gets a folder of its own, ``<trainer.default_root_dir>/<experiment>/<run>/``.

A run's folder holds all it writes: ``config.yaml`` (written once, by the ``fit`` that created the run),
``provenance.yaml`` (see ``provenance.py``), TensorBoard events, ``checkpoints/``, and what ``predict`` and
``export`` produce from its checkpoints. An unnamed run is named after its start time (``2025-01-31_14-03-22``;
a second one started in the same second gets ``2025-01-31_14-03-22-2``); ``run.name`` names the folder instead.
Without a name, ``--ckpt_path best|last`` means that file of the newest run of the experiment that has one; a
path to any run's checkpoint works too. ``fit --ckpt_path last`` continues that run in its folder; ``fit`` from any
other checkpoint starts a new run, and leaves the one it came from untouched (``plan_run``).
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime
from itertools import count
from typing import Any

from ..project import Project, current
from ..store import RunPath, StoreError, StorePath, location
from ..store_access import check_root
from .records import FILE, read_record, session_status

FOLDER_TIME = "%Y-%m-%d_%H-%M-%S"
CHECKPOINTS = "checkpoints"
SHARDED_METADATA = "meta.pt"  # Lightning's (lightning_internals/), named here: `runs` loads no torch
ALIASES = ("best", "last")  # `--ckpt_path` values that name a file of a run's `checkpoints/`
LIGHTNING_ALIASES = ("hpc", "registry")  # values that Lightning resolves itself


class RunDirectory:
    """Where a run writes: ``<trainer.default_root_dir>/<experiment>/<name>``, a new folder for each ``fit``."""

    def __init__(self, experiment: str = "default", name: str | None = None) -> None:
        """Names the run.

        Args:
            experiment: The group of runs this one belongs to (a folder under ``trainer.default_root_dir``).
            name: The run's own folder; ``null``: a new folder named after the start time, for every ``fit``.
                A named run that exists is only resumed (``--ckpt_path last``), never overwritten.
        """
        for key, value in (("experiment", experiment), ("name", name)):
            if value is not None and (not value or value in {".", ".."} or "/" in value or os.sep in value):
                raise ValueError(f"run.{key} must be a folder name, got {value!r}")
            if value is not None and not value.isprintable():  # a newline breaks `runs`' rows and every command
                raise ValueError(f"run.{key} must be a folder name without control characters, got {value!r}")
        self.experiment = experiment
        self.name = name


@dataclass
class RunPlan:
    """What a command works on: the run folder, the checkpoint to load, and whether ``fit`` creates the folder."""

    experiment_dir: RunPath
    directory: RunPath | None  # None: no run (a new unnamed one, or a command that uses no run)
    ckpt_path: str | None
    create: bool = False
    resumed: bool = False  # `fit` continues this run in place, from its own last.ckpt
    parent: RunPath | None = None  # `fit` starts a new run from this run's checkpoint (best, or another run's)
    name: str | None = None  # the new run's folder name (null: its start time)

    def make(self) -> RunPath:
        """Creates the run's folder if the plan says so; returns the folder the command works in."""
        if self.create:
            self.directory = create_run(self.experiment_dir, self.name)
        return self.directory or self.experiment_dir


def plan_run(run: RunDirectory, root: RunPath, fitting: bool, ckpt_path: str | None, decides: bool = True) -> RunPlan:
    """Decides which run a command works on, from ``run.name`` and ``--ckpt_path``; writes nothing.

    Only a run's ``last`` continues that run in place (``--ckpt_path last``, or its ``last.ckpt`` by path). ``fit``
    from any other checkpoint (a run's best, another run's, a search trial's, a file of no run) starts a new run,
    whose provenance names the parent; the source run is left as it is. With an alias, ``run.name`` names the run
    it refers to, but for ``fit --ckpt_path best`` with a name no run has: that names the new run, which starts from
    the newest run's best; with a path, the run to write (a new one, unless it is the file's own run).

    Raises ``ValueError`` for a checkpoint that does not exist and, where this process ``decides`` (global rank
    0; the others start when it may already have created the run), for a named run that ``fit`` would overwrite.
    """
    experiment_dir = root / run.experiment
    named = experiment_dir / run.name if run.name else None
    plan = RunPlan(experiment_dir, named, ckpt_path, name=run.name)
    if ckpt_path in ALIASES:
        filename = f"{ckpt_path}.ckpt"
        owner = named or newest_run(experiment_dir, filename)
        path = owner / CHECKPOINTS / filename if owner else None
        if path is not None and is_checkpoint(path):
            if fitting and ckpt_path != "last":  # fine-tuning from the best: a new run, its parent the owner
                return RunPlan(experiment_dir, None, str(path), create=True, parent=owner)
            return RunPlan(experiment_dir, owner, str(path), resumed=fitting)
        # `fit --ckpt_path best --run.name X`, X not a run: the new run X starts from the newest run's best.
        new_name = fitting and ckpt_path == "best" and named is not None and not named.exists()
        if new_name and (source := newest_run(experiment_dir, filename)) is not None:
            best = str(source / CHECKPOINTS / filename)
            return RunPlan(experiment_dir, None, best, create=True, parent=source, name=run.name)
        if not (fitting and ckpt_path == "last"):
            if named is not None and not named.exists():
                nothing = f", and no run there has a {filename} to start from" if fitting else ""
                raise ValueError(
                    f"--ckpt_path {ckpt_path} --run.name {run.name}: {experiment_dir} has no run named"
                    f" {run.name!r}{nothing} (`runs` lists the runs)"
                )
            where = path or experiment_dir / "<run>" / CHECKPOINTS / filename
            raise ValueError(f"--ckpt_path {ckpt_path}: no {where} (has `fit` run with this config?)")
        # Nothing to resume yet: the same command starts the run (a named one may exist without a checkpoint).
        plan.ckpt_path = None
        plan.create = named is None or not named.exists()
        return plan
    parent = None
    if ckpt_path is not None and ckpt_path not in LIGHTNING_ALIASES:
        checkpoint = location(ckpt_path)
        if not is_checkpoint(checkpoint):
            raise ValueError(f"--ckpt_path {ckpt_path}: no such checkpoint file")
        owner = run_of(checkpoint)
        own_run = owner is not None and (named is None or named.resolve() == owner.resolve())
        if own_run and (not fitting or checkpoint.name == "last.ckpt"):
            return RunPlan(experiment_dir, owner, ckpt_path, resumed=fitting)
        if not fitting:
            plan.directory = owner or named
            return plan
        parent = owner  # a new run from this checkpoint
    if fitting:  # a new run: from scratch, or starting from a checkpoint
        exists = named is not None and named.exists() and any(named.iterdir())
        if decides and exists and ckpt_path not in LIGHTNING_ALIASES:
            raise ValueError(
                f"run {named} exists: resume it with --ckpt_path last, or start a new run with another"
                " --run.name (or --run.name null: a new folder named after the start time)"
            )
        plan.create = named is None or not named.exists()
        plan.parent = parent
    return plan


def create_run(experiment_dir: RunPath, name: str | None) -> RunPath:
    """A new, empty run folder: ``name``, or the current time. ``os.mkdir`` is atomic: no two fits share one. A store
    has no folders: a time not taken yet names the run, and its lock, a conditional write, is what no two fits share
    (``lock.py``)."""
    experiment_dir.mkdir(parents=True, exist_ok=True)
    if name is not None:
        path = experiment_dir / name
        path.mkdir(exist_ok=True)  # plan_run refused a named run that holds anything
        return path
    stamp = datetime.now().strftime(FOLDER_TIME)
    for number in count(1):
        path = experiment_dir / (stamp if number == 1 else f"{stamp}-{number}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


def is_run(path: RunPath) -> bool:
    """Whether ``path`` is a run folder (it holds a config, a provenance record or checkpoints)."""
    return any((path / name).exists() for name in ("provenance.yaml", "config.yaml", CHECKPOINTS))


def runs(experiment_dir: RunPath) -> list[RunPath]:
    """The runs of an experiment, oldest first (by their recorded start, else by the folder's time)."""
    return [run for run, _ in runs_with_records(experiment_dir)]


def runs_with_records(experiment_dir: RunPath) -> list[tuple[RunPath, dict[str, Any] | None]]:
    """The runs of an experiment, oldest first, each with its provenance record (``None``: it has none), each
    record read once. A run whose ``provenance.yaml`` is not a record is named once on stderr and skipped."""
    if not experiment_dir.is_dir():
        return []
    found = []
    for path in experiment_dir.iterdir():
        if path.is_dir() and is_run(path):
            record = read_record(path)
            if record is not None or not (path / FILE).exists():
                found.append((path, record))
    return sorted(found, key=lambda item: _started(*item))


def newest_run(experiment_dir: RunPath, filename: str) -> RunPath | None:
    """The newest run of the experiment that has ``checkpoints/<filename>``."""
    return next((run for run in reversed(runs(experiment_dir)) if is_checkpoint(run / CHECKPOINTS / filename)), None)


def is_checkpoint(path: RunPath) -> bool:
    """Whether ``path`` is a checkpoint: a file, or the folder of a sharded one (``safety/sharded_checkpoints.py``)."""
    return path.is_file() or (path / SHARDED_METADATA).is_file()


def run_of(checkpoint: RunPath) -> RunPath | None:
    """The run that wrote ``checkpoint`` (a file in ``<run>/checkpoints/``), or ``None``."""
    folder = checkpoint.parent
    return folder.parent if folder.name == CHECKPOINTS and is_run(folder.parent) else None


def shell_command(program: str, *words: object) -> str:
    """A command to copy and paste into a shell: ``program`` (the project's console script, as it is typed), then
    ``words`` each quoted as the shell needs (a run in ``x y/ü z``)."""
    return f"{program} {shlex.join(map(str, words))}"


def _started(run: RunPath, record: dict[str, Any] | None) -> tuple[str, str]:
    sessions = (record or {}).get("sessions") or [{}]
    if not (started := sessions[0].get("started")):
        try:  # a store's folder has no time of its own: its config's
            mtime = (run / "config.yaml" if isinstance(run, StorePath) else run).stat().st_mtime
        except OSError:
            mtime = 0.0
        started = datetime.fromtimestamp(mtime).astimezone().isoformat()
    return str(started), run.name


def main(argv: list[str], project: Project) -> None:
    """``<program> runs``: the flags of ``list_runs``."""
    from jsonargparse import auto_cli

    auto_cli(list_runs, args=argv, prog=f"{project.program} runs")


def list_runs(root: str = "runs", experiment: str | None = None) -> None:
    """Lists the runs, each with the command that resumes it (or validates it, when it finished).

    One row per run: experiment, folder, start, status (see ``provenance.STATUSES``), epochs and steps
    trained, best value of the monitored metric, the processes of each session (``2,1``: resumed on 1), command.

    Args:
        root: The folder that holds the experiments (``trainer.default_root_dir``; a store's URL: ``s3://b/runs``).
        experiment: Only this experiment's runs; ``null``: every experiment under ``root``.
    """
    try:
        where = location(root)
        check_root(where)
    except StoreError as error:  # before anything is read: one line, as every refusal
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(format_runs(where, experiment))


def _with_studies(experiments: list[RunPath]) -> list[tuple[RunPath, str]]:
    """Each experiment's folder, then those of its searches and sweeps (``<experiment>/sweep``: folders of runs with
    a ``base.yaml``), each with the name ``runs`` shows."""
    found = []
    for folder in experiments:
        found.append((folder, folder.name))
        nested = sorted(folder.iterdir(), key=str) if folder.is_dir() else []
        found += [(f, f"{folder.name}/{f.name}") for f in nested if (f / "base.yaml").is_file() and not is_run(f)]
    return found


def format_runs(root: RunPath, experiment: str | None = None) -> str:
    """The table that ``list_runs`` prints, oldest run first within each experiment."""
    program = current().program
    found = root.iterdir() if root.is_dir() else ()
    experiments = [root / experiment] if experiment else sorted((p for p in found if p.is_dir()), key=str)
    rows = [("EXPERIMENT", "RUN", "STARTED", "STATUS", "EPOCHS", "STEPS", "BEST", "PROCESSES", "COMMAND")]
    for experiment_dir, label in _with_studies(experiments):
        for run, found in runs_with_records(experiment_dir):
            record = found or {}
            progress, sessions = record.get("progress") or {}, record.get("sessions") or [{}]
            status = session_status(record) if record else "?"
            best = progress.get("best") or {}
            checkpoints = {name for name in ("last", "best") if is_checkpoint(run / CHECKPOINTS / f"{name}.ckpt")}
            if "last" in checkpoints and status not in ("finished", "running"):
                command = shell_command(program, "fit", "-c", run / "config.yaml", "--ckpt_path", "last")
            elif checkpoints:
                command = shell_command(program, "validate", "-c", run / "config.yaml", "--ckpt_path", min(checkpoints))
            else:
                command = "-"
            rows.append(
                (
                    label,
                    run.name,
                    str(sessions[0].get("started") or "?")[:16].replace("T", " "),
                    status,
                    str(progress.get("epochs", "-")),
                    str(progress.get("step", "-")),
                    f"{best['monitor']}={best['value']:.4g}" if best else "-",
                    ",".join(str((s.get("devices") or {}).get("world_size", "?")) for s in sessions if s) or "-",
                    command,
                )
            )
    if len(rows) == 1:
        return f"no runs under {root}" + (f"/{experiment}" if experiment else "")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]) for row in rows
    )
