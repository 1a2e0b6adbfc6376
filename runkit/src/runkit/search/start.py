"""Starting or joining a study: joined only with the same space, metric and fit config, in a folder of its own."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid

import optuna
import yaml

from ..command.runs import is_run
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
    fit = yaml.safe_load(base)
    fit.get("trainer", {}).pop("default_root_dir", None)  # may differ between machines
    identity = {"space": [vars(d) for d in plan.space], "metric": plan.metric, "direction": plan.direction, "fit": fit}
    fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    study, storage = plan.open_study()
    with exclusive(storage, plan.study_name):  # workers that start together agree on one id
        known = study.user_attrs.get("fingerprint")
        if known is None:
            study.set_user_attr("fingerprint", fingerprint)
        elif known != fingerprint:
            raise ValueError(
                f"study {plan.study_name!r} in {where} was started with another space, metric or fit config; give"
                " this search another --run.name"
            )
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
