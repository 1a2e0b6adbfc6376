"""Starting or joining a study: joined only with the same space, metric and fit config, in a folder of its own.

The same fit config may be spelled otherwise than when the study started, by an earlier runkit or an earlier
template: class paths ``<package>.kit.X`` from before runkit was a library (``runkit.X`` now), ``best_checkpoint``'s
``mode: max`` where the template now leaves it to the metric's name, a key a later runkit added with the value that
changes nothing (``last_checkpoint.background``: a save in the background trains the same). The study is joined then
too, checked against the ``base.yaml`` its last command wrote (which hashes to the study's fingerprint), and holds the
new spelling's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from typing import Any

import optuna
import yaml

from ..legacy import current_names
from ..run.folders import is_run
from ..run.resume_keys import flat
from ..safety.monitor_mode import checked_mode
from .storage import JOURNAL, exclusive, shown, study_exists
from .trial import MARK, trial_dir
from .worker import Plan


def start_study(plan: Plan, base: str) -> tuple[optuna.Study, optuna.storages.BaseStorage, Plan]:
    """Creates the study, or joins it when its space, metric and ``base`` config are this command's.

    A new study never takes over trial folders it finds in the search directory (an earlier study's, whose journal
    is gone or lives in another storage), and a fit run's folder is never a search's: both are refused before
    anything is written. Returns the plan with the study's id, which marks the trial folders it makes.
    """
    where = shown(plan.storage) if plan.storage else plan.search_dir / JOURNAL
    if is_run(plan.search_dir):
        raise ValueError(
            f"run.name: {plan.search_dir} is a fit run, not a search's folder: give the search another --run.name"
        )
    found = sorted(path.name for path in plan.search_dir.glob("trial-*") if path.is_dir())
    if found and not study_exists(plan.storage, plan.search_dir, plan.study_name):
        raise ValueError(
            f"{plan.search_dir} holds trial folders of another study ({', '.join(found)}): this study ({where}) did"
            " not make them; give the search another --run.name, or move them away"
        )
    identity = {"space": [vars(d) for d in plan.space], "metric": plan.metric, "direction": plan.direction}
    fit = _fit(yaml.safe_load(base))
    fingerprint = _fingerprint(identity, fit)
    study, storage = plan.open_study()
    with exclusive(storage, plan.study_name):  # workers that start together agree on one id
        known = study.user_attrs.get("fingerprint")
        if known is not None and known != fingerprint:
            before = _fit_before(plan, identity, known)
            if before is None or _canonical(before) != _canonical(fit):
                name, what = ("sweep", "grid") if plan.kind == "sweep" else ("study", "space")
                raise ValueError(
                    f"{name} {plan.study_name!r} in {where} was started with another {what}, metric or fit"
                    f" config{_differences(before, fit)}; give this {plan.kind} another --run.name"
                )
        if known != fingerprint:  # a new study, or this one's config in this spelling from now on
            study.set_user_attr("fingerprint", fingerprint)
        if (uid := study.user_attrs.get("uid")) is None:
            uid = uuid.uuid4().hex
            study.set_user_attr("uid", uid)
            adopt_own_trials(plan, study, uid)
    return study, storage, dataclasses.replace(plan, study_uid=uid)


def adopt_own_trials(plan: Plan, study: optuna.Study, uid: str) -> None:
    """Marks the trial folders of a study that a version without marks started (its trials are in the study)."""
    for trial in study.get_trials(deepcopy=False):
        folder = trial_dir(plan.search_dir, trial.system_attrs.get("failed_trial", trial.number))
        if folder.is_dir() and not (folder / MARK).exists():
            (folder / MARK).write_text(f"study: {uid}\n")


def _fit(config: Any) -> Any:
    """A fit config as the study's identity holds it: without ``trainer.default_root_dir`` (machines differ)."""
    if isinstance(config, dict) and isinstance(config.get("trainer"), dict):
        config["trainer"].pop("default_root_dir", None)
    return config


def _fingerprint(identity: dict[str, Any], fit: Any) -> str:
    return hashlib.sha256(json.dumps({**identity, "fit": fit}, sort_keys=True, default=str).encode()).hexdigest()


def _fit_before(plan: Plan, identity: dict[str, Any], known: str) -> Any:
    """The study's fit config as its last command wrote it (``base.yaml``), if that is the one its fingerprint holds."""
    try:
        before = _fit(yaml.safe_load(plan.base_config.read_text()))
    except (OSError, yaml.YAMLError):
        return None
    return before if _fingerprint(identity, before) == known else None


ADDED_KEYS = {("last_checkpoint", "background"): True}
"""Keys a later runkit added to every fit config, with the value that does what runs did before them: a study's
base.yaml written before one was added holds the same config."""


def _canonical(fit: Any) -> Any:
    """``fit`` with runkit's class paths as runkit names them now, ``best_checkpoint``'s mode as it ranks, and the keys
    added since (``ADDED_KEYS``) left out where they hold the value that changes nothing."""
    fit = current_names(fit)
    for (section, key), value in ADDED_KEYS.items():
        part = fit.get(section) if isinstance(fit, dict) else None
        if isinstance(part, dict) and key in part and part[key] == value:
            fit = {**fit, section: {name: held for name, held in part.items() if name != key}}
    best = fit.get("best_checkpoint") if isinstance(fit, dict) else None
    arguments = best.get("init_args") if isinstance(best, dict) else None
    if isinstance(arguments, dict):
        try:
            mode = checked_mode(arguments.get("monitor"), arguments.get("mode"))
        except ValueError:
            return fit
        fit = {**fit, "best_checkpoint": {**best, "init_args": {**arguments, "mode": mode}}}
    return fit


def _differences(before: Any, fit: Any, shown: int = 3) -> str:
    """`` (fit keys that differ from its base.yaml: ...)``, when the study's base.yaml is known; else nothing."""
    if not isinstance(before, dict) or not isinstance(fit, dict):
        return ""
    ours, theirs = flat(_canonical(fit), "fit"), flat(_canonical(before), "fit")
    keys = sorted(
        key.removeprefix("fit.")
        for key in ours.keys() ^ theirs.keys()
        | {key for key in ours.keys() & theirs.keys() if ours[key] != theirs[key]}
    )
    more = f", and {len(keys) - shown} more" if len(keys) > shown else ""
    return f" (fit keys that differ from its base.yaml: {', '.join(keys[:shown])}{more})" if keys else ""
