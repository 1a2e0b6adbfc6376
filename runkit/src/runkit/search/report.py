"""What a search shows and leaves behind: a line per trial, the table of trials, and the best trial as a preset.

The preset (``best.yaml`` in the search directory) holds what the best trial's config changes from the default
config (its values, and the search config's own settings such as fewer epochs), so ``fit -c best.yaml``
trains that trial again, with the same seed and the same result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from ..legacy import current_names
from .space import Dimension

# Keys the preset leaves out: where a run writes is the user's choice, not a setting of the trial.
_NOT_SETTINGS = ("run", "trainer.default_root_dir", "ckpt_path", "config")
_STATES = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned", TrialState.FAIL: "failed"}


def counted(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count toward the budget: every trial except failed ones whose configuration was retried."""
    retried = {number for trial in trials for number in trial.system_attrs.get("retry_history", [])}
    return [trial for trial in trials if trial.number not in retried]


def ranked(study: optuna.Study) -> list[FrozenTrial]:
    """Finished trials, best first: complete ones by value, then pruned ones by their last value, then the rest."""
    sign = 1.0 if study.direction == optuna.study.StudyDirection.MINIMIZE else -1.0

    def order(trial: FrozenTrial) -> tuple[int, float]:
        group = {TrialState.COMPLETE: 0, TrialState.PRUNED: 1}.get(trial.state, 2)
        return group, sign * trial.value if trial.value is not None else float("inf")

    return sorted((trial for trial in study.get_trials(deepcopy=False) if trial.state.is_finished()), key=order)


def progress_line(study: optuna.Study, trial: FrozenTrial, space: list[Dimension], metric: str, budget: int) -> str:
    """``trial 3 complete: val/loss=0.0123 (best 0.0110, trial 2) | lr=0.001 hidden=48 | 12.3 s | 4/12 done``."""
    retry = trial.system_attrs.get("failed_trial")
    state = _STATES.get(trial.state, trial.state.name.lower()) + (f" (retry of {retry})" if retry is not None else "")
    best = _best(study)
    best_text = f" (best {best.value:.6g}, trial {best.number})" if best is not None else ""
    value = f"{metric}={trial.value:.6g}{best_text}" if trial.value is not None else "no value"
    params = " ".join(f"{dimension.name}={_text(trial.params.get(dimension.key))}" for dimension in space)
    done = sum(trial.state.is_finished() for trial in counted(study.get_trials(deepcopy=False)))
    return f"trial {trial.number} {state}: {value} | {params} | {_seconds(trial)} | {done}/{budget} done"


def table(study: optuna.Study, space: list[Dimension], metric: str) -> str:
    """Every finished trial, best first: rank, trial, state, metric, time and values."""
    header = ["rank", "trial", "state", metric, "time", *(dimension.name for dimension in space)]
    retried_as = {
        t.system_attrs["failed_trial"]: t.number for t in study.get_trials() if "failed_trial" in t.system_attrs
    }
    rows, rank = [header], 0
    for trial in ranked(study):
        state = _STATES.get(trial.state, trial.state.name.lower())
        if trial.state == TrialState.FAIL and trial.number in retried_as:
            state += f" (retried: {retried_as[trial.number]})"
        rank += trial.state == TrialState.COMPLETE
        value = f"{trial.value:.6g}" if trial.value is not None else "-"
        params = [_text(trial.params.get(dimension.key)) for dimension in space]
        ranking = str(rank) if trial.state == TrialState.COMPLETE else "-"
        rows.append([ranking, str(trial.number), state, value, _seconds(trial), *params])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def write_best_preset(path: Path, trial_config: Path, default_config: dict[str, Any], note: str) -> Path:
    """Writes what ``trial_config`` (a trial's saved ``config.yaml``) changes from ``default_config`` to ``path``.

    A trial made before runkit was a library names runkit's classes ``<package>.kit.X``: read as ``runkit.X``, the
    same class is no change."""
    changes = _difference(current_names(yaml.safe_load(trial_config.read_text())), default_config)
    preset: dict[str, Any] = {}
    for key, value in changes.items():
        node = preset
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path.write_text("".join(f"# {line}\n" for line in note.splitlines()) + yaml.safe_dump(preset, sort_keys=False))
    return path


def _difference(config: dict[str, Any], default: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys whose values differ; a class whose ``class_path`` changed is kept whole (its arguments too)."""
    changes: dict[str, Any] = {}
    for key, value in config.items():
        dotted, other = f"{prefix}{key}", default.get(key) if isinstance(default, dict) else None
        if dotted in _NOT_SETTINGS:
            continue
        if isinstance(value, dict) and isinstance(other, dict) and value.get("class_path") == other.get("class_path"):
            changes.update(_difference(value, other, f"{dotted}."))
        elif value != other:
            changes[dotted] = value
    return changes


def _best(study: optuna.Study) -> FrozenTrial | None:
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value) if isinstance(value, (int, str)) or value is None else json.dumps(value)


def _seconds(trial: FrozenTrial) -> str:
    if trial.datetime_start is None or trial.datetime_complete is None:
        return "-"
    return f"{(trial.datetime_complete - trial.datetime_start).total_seconds():.1f} s"
