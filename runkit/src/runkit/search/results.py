"""A sweep's one table: a row per combination of its non-seed axes, with the mean and std over seeds of the
monitored metric and of every other final metric, the best cell, the time; failed cells with their one line.

Read from the sweep's study (its storage), so it shows a finished sweep and a running one alike. Written as
``results.csv`` and ``results.md`` in the sweep's folder, and ``results.png`` (the monitored metric per row with
error bars) where matplotlib is installed; the terminal table needs nothing.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from .grid import cells

if TYPE_CHECKING:
    from .cell import SweepPlan

FILES = ("results.csv", "results.md", "results.png")


@dataclass
class CellResult:
    """Where one cell stands: its latest trial's state, its metrics or its error, and its time in all its trials."""

    name: str
    state: str = "not started"  # complete, failed, running, queued (stopped, to resume), not started
    value: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Row:
    """One combination of the non-seed axes, over its seeds."""

    labels: tuple[str, ...]
    results: list[CellResult]
    means: dict[str, float | None]
    stds: dict[str, float | None]
    best: str | None
    seconds: float | None

    @property
    def n(self) -> int:
        return sum(result.state == "complete" for result in self.results)


def cell_results(study: optuna.Study, plan: SweepPlan) -> dict[str, CellResult]:
    """Every cell of the grid, by name, as the study holds it now."""
    results = {cell.name: CellResult(cell.name) for cell in cells([*plan.axes])}
    latest: dict[str, int] = {}
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        params = trial.params or trial.system_attrs.get("fixed_params") or {}
        if any(axis.name not in params for axis in plan.axes):
            continue
        name = plan.cell_of(params).name
        if name not in results:
            continue
        result = results[name]
        if trial.datetime_start is not None:
            end = trial.datetime_complete or _now(trial)
            result.seconds += (end - trial.datetime_start).total_seconds()
        latest[name] = trial.number
        result.state = {
            TrialState.COMPLETE: "complete",
            TrialState.RUNNING: "running",
            TrialState.WAITING: "queued",
            TrialState.FAIL: "failed",
            TrialState.PRUNED: "complete",
        }[trial.state]
        result.value = trial.value
        result.metrics = {plan.metric: trial.value} if trial.value is not None else {}
        result.metrics.update({k: v for k, v in trial.user_attrs.get("metrics", {}).items() if k != plan.metric})
        result.error = trial.user_attrs.get("error") if trial.state == TrialState.FAIL else None
        if trial.state == TrialState.FAIL and result.error is None:  # stopped by a signal: it resumes
            result.state, result.error = "queued", None
    return results


def rows(plan: SweepPlan, results: dict[str, CellResult]) -> list[Row]:
    """A row per combination of the non-seed axes (the grid's order), over the seed axes' cells."""
    grouped: dict[tuple[str, ...], list[CellResult]] = defaultdict(list)
    for cell in cells([*plan.axes]):
        key = tuple(cell.label(axis.name) for axis in plan.axes if not axis.is_seed)
        grouped[key].append(results[cell.name])
    sign = 1.0 if plan.direction == "minimize" else -1.0
    out = []
    for labels, members in grouped.items():
        done = [result for result in members if result.state == "complete"]
        names = [plan.metric, *sorted({m for r in done for m in r.metrics} - {plan.metric})]
        means, stds = {}, {}
        for name in names:
            values = [r.metrics[name] for r in done if r.metrics.get(name) is not None]
            means[name] = statistics.fmean(values) if values else None
            stds[name] = spread(values)
        ranked = sorted((r for r in done if r.value is not None), key=lambda r: sign * r.value)  # type: ignore[operator]
        seconds = statistics.fmean(r.seconds for r in done) if done else None
        out.append(Row(labels, members, means, stds, ranked[0].name if ranked else None, seconds))
    return out


def spread(values: list[float]) -> float | None:
    """The standard deviation of a metric over seeds (``None`` for one value); NaN where a value is NaN or infinite
    (``statistics.stdev`` raises on them, and a diverged seed must not lose the whole table)."""
    if len(values) < 2:
        return None
    return statistics.stdev(values) if all(math.isfinite(value) for value in values) else math.nan


def table(plan: SweepPlan, found: list[Row]) -> str:
    """The terminal table: the axes, n, the monitored metric and the other validation metrics (mean ± std), the best
    cell, seconds per cell; then the failed cells, each with its line, and what is still to run."""
    names = [axis.name for axis in plan.axes if not axis.is_seed]
    shown = [plan.metric, *sorted({m for row in found for m in row.means if m.startswith("val/")} - {plan.metric})]
    seeds = [axis for axis in plan.axes if axis.is_seed]
    per_row = len(seeds[0].labels) if seeds else 1
    header = [*names, "n", *shown, "best", "s/cell"]
    lines = [header]
    for row in found:
        lines.append(
            [
                *row.labels,
                f"{row.n}/{per_row}",
                *(_mean_std(row.means.get(m), row.stds.get(m)) for m in shown),
                row.best or "-",
                f"{row.seconds:.1f}" if row.seconds is not None else "-",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    for row in found:
        text += [f"failed  {r.name}: {r.error}" for r in row.results if r.state == "failed"]
    waiting = defaultdict(int)
    for row in found:
        for result in row.results:
            if result.state in ("running", "queued", "not started"):
                waiting[result.state] += 1
    if waiting:
        order = [state for state in ("running", "queued", "not started") if waiting[state]]
        text.append("still to run: " + ", ".join(f"{waiting[state]} {state}" for state in order))
    return "\n".join(text)


def write_results(plan: SweepPlan, found: list[Row]) -> list[Path]:
    """Writes ``results.csv``, ``results.md`` and, with matplotlib, ``results.png`` in the sweep's folder."""
    names = [axis.name for axis in plan.axes if not axis.is_seed]
    metrics = [plan.metric, *sorted({m for row in found for m in row.means} - {plan.metric})]
    header = [*names, "n", "cells", *(f"{m} {s}" for m in metrics for s in ("mean", "std")), "best", "s/cell"]
    header.append("failed")
    table_rows = []
    for row in found:
        failed = "; ".join(f"{r.name}: {r.error}" for r in row.results if r.state == "failed")
        stats = [_number(value) for m in metrics for value in (row.means.get(m), row.stds.get(m))]
        seconds = _number(row.seconds)
        table_rows.append([*row.labels, str(row.n), str(len(row.results)), *stats, row.best or "", seconds, failed])
    folder = plan.search_dir
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "results.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(table_rows)
    markdown = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    markdown += ["| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in table_rows]
    (folder / "results.md").write_text("\n".join(markdown) + "\n")
    written = [folder / "results.csv", folder / "results.md"]
    if (png := _plot(plan, found, names)) is not None:
        written.append(png)
    return written


def _plot(plan: SweepPlan, found: list[Row], names: list[str]) -> Path | None:
    """The monitored metric per row, mean with std error bars (``None``: matplotlib is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    drawn = [row for row in found if row.means.get(plan.metric) is not None]
    figure, axes = plt.subplots(figsize=(max(4.0, 1.2 * len(drawn) + 2), 4))
    labels = [",".join(row.labels) or "all" for row in drawn]
    errors = [row.stds.get(plan.metric) or 0.0 for row in drawn]
    axes.errorbar(range(len(drawn)), [row.means[plan.metric] for row in drawn], yerr=errors, fmt="o", capsize=4)
    axes.set_xticks(range(len(drawn)), labels, rotation=30, ha="right")
    axes.set_ylabel(f"{plan.metric} (mean ± std over seeds)")
    axes.set_xlabel(", ".join(names))
    figure.tight_layout()
    path = plan.search_dir / "results.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _mean_std(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "-"
    return f"{mean:.4g}" + (f" ± {std:.2g}" if std is not None else "")


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _now(trial: optuna.trial.FrozenTrial) -> datetime:
    """Now, in the time zone of the trial's start (Optuna's are naive local times)."""
    return datetime.now(trial.datetime_start.tzinfo if trial.datetime_start else None)
