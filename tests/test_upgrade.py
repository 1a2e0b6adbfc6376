"""A project made from the last vendored release moves to the runkit library with `cruft update` and `pip install -e .`,
as CHANGELOG.md says, and the runs it made before keep working.

The project is made with ``cruft create`` from the template at ``BEFORE`` (the kit in ``src/<package>/kit/``) and
edited as a team edits one: a config value, a task default, a preset of its own that names kit classes. With that
code it makes runs (writing bytecode, as a team's machine does): a fit stopped by SIGTERM mid-epoch, the same fit
uninterrupted (the reference, and a finished run with a best checkpoint), and a search study. Then it is updated to
this working tree's template and installed again, and runkit validates, resumes, lists and continues those runs,
whose config.yaml, checkpoints and study name ``<package>.kit.X`` class paths.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from conftest import ROOT, SMOKE_TESTS, TEMPLATE_FILES, assert_tests_pass, copy_template, cruft, git, install, run
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

BEFORE = "d8a50b8d74d02f7c4309cbf9e3369bfdfcfd5f16"  # the last release with the kit inside the project
ANSWERS = {"project_name": "Upgrade Follower"}
PROJECT, PACKAGE = "upgrade-follower", "upgrade_follower"
KIT = f"src/{PACKAGE}/kit"

# The team's edits: (file, text, the team's text). The update keeps them.
EDITS = [
    ("configs/example/model.yaml", "        lr: 0.003\n", "        lr: 0.002\n"),  # a config value
    (
        f"src/{PACKAGE}/task/classifier.py",
        "        label_smoothing: float = 0.0,\n",
        "        label_smoothing: float = 0.1,\n",
    ),
]
PRESET = "configs/team/long_warmup.yaml"
PRESET_TEXT = f"""# The team's schedule: a longer warmup, and early stopping on the best checkpoint's metric.
model:
  init_args:
    scheduler:
      class_path: {PACKAGE}.kit.WarmupCosine
      init_args:
        warmup_fraction: 0.25
trainer:
  callbacks+:
    - class_path: {PACKAGE}.kit.EarlyStoppingOnBest
      init_args:
        patience: 5
"""
SMALL = ("-c", "configs/debug/tiny.yaml", "-c", "configs/example/small_data.yaml", "-c", PRESET)  # 2 epochs of 4 steps
# SIGTERM as step 6 starts (mid-epoch 1, after epoch 0's validation): the step completes, last.ckpt is saved, exit 143.
SIGTERM_AT_STEP_5 = "--trainer.callbacks+=" + json.dumps(
    {"class_path": "faults.SignalAtStep", "init_args": {"step": 5, "signum": int(signal.SIGTERM), "hook": "start"}}
)
SEARCH = ("search", "-c", "configs/search/default.yaml", *SMALL)
SEARCH_AFTER = ("search", "-c", "configs/example/search.yaml", *SMALL)  # the template moved the example's search there
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")
METRIC = re.compile(r"^│\s*(val/\w+)\s*│\s*(\S+)\s*│$", re.MULTILINE)  # a line of Lightning's table of metrics


def template_repository(repo: Path) -> str:
    """A git repository of the template: ``BEFORE`` (from this repository's history), then this working tree on top.

    Returns the first commit, which the project is made from; ``cruft update`` takes it to the second.
    """
    if run(ROOT, "git", "cat-file", "-e", f"{BEFORE}^{{commit}}").returncode != 0:
        pytest.fail(f"the template's commit {BEFORE[:7]} is not in {ROOT}: the upgrade test needs its git history")
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    then = [name for name in TEMPLATE_FILES if git(ROOT, "ls-tree", "--name-only", BEFORE, name).strip()]
    archive = repo / "before.tar"
    git(ROOT, "archive", f"--output={archive}", BEFORE, *then)
    assert run(repo, "tar", "-xf", str(archive)).returncode == 0
    archive.unlink()
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", f"--message=template at {BEFORE[:7]}")
    first = git(repo, "rev-parse", "HEAD").strip()
    copy_template(repo)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--message=the kit becomes runkit")
    return first


def make_project(template: Path, first: str, where: Path) -> Path:
    """``cruft create`` from the template at ``first``; the project, a git repository with one commit."""
    where.mkdir()
    created = cruft(where, "create", str(template), "--checkout", first, "--no-input", "--extra-context",
                    json.dumps(ANSWERS))  # fmt: skip
    assert created.returncode == 0, created.stderr
    project = where / PROJECT
    assert (project / KIT / "__init__.py").is_file()  # the layout before
    git(project, "init", "--quiet", "--initial-branch=main")
    commit_all(project, "baked")
    return project


def commit_all(project: Path, message: str) -> None:
    git(project, "add", "--all")
    git(project, "commit", "--quiet", f"--message={message}")


def command(
    project: Path, *args: str, path: Path | None = None, bytecode: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m <package> *args`` in ``project`` (``path`` first on ``PYTHONPATH``); its output.

    ``bytecode``: Python writes ``__pycache__`` folders, as on a team's machine (the tests' environment may not).
    """
    env = {key: value for key, value in os.environ.items() if not bytecode or key != "PYTHONDONTWRITEBYTECODE"}
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", PACKAGE, *args], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )


def succeeds(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert done.returncode == code, f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def metrics(output: str) -> dict[str, str]:
    """The validation metrics a command printed, as printed (every digit)."""
    return dict(METRIC.findall(output))


def runs_table(project: Path) -> dict[str, list[str]]:
    """``runs``' table: run name -> its status, epochs and steps."""
    lines = succeeds(command(project, "runs")).splitlines()
    assert lines[0].split()[:7] == ["EXPERIMENT", "RUN", "STARTED", "STATUS", "EPOCHS", "STEPS", "BEST"]
    return {line.split()[1]: line.split()[4:7] for line in lines[1:]}


def study(project: Path) -> optuna.Study:
    journal = project / "runs/debug/search/study.log"
    return optuna.load_study(study_name="search", storage=JournalStorage(JournalFileBackend(str(journal))))


def trials(project: Path) -> list[tuple[int, str, float | None, dict[str, Any]]]:
    return [(t.number, t.state.name, t.value, t.params) for t in study(project).get_trials(deepcopy=False)]


def documented_install() -> list[str]:
    """CHANGELOG.md's command that installs the project again (the one command of the move), split."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    section = text[: text.index("\n## ", text.index("## The kit becomes the runkit library"))]
    (line,) = re.findall(r"```bash\n\s*(pip install .*)\n\s*```", section)
    return line.split()


def assert_merged(project: Path) -> None:
    """The update merged: no conflict, no `.rej` file, nothing untracked (what it changed is staged)."""
    status = git(project, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert [line for line in status if line[:2] not in ("M ", "A ", "D ", "R ", " M")] == []  # R: a file it moved
    assert list(project.rglob("*.rej")) == []


def assert_identical(ours: Any, theirs: Any, key: str) -> None:
    if isinstance(ours, torch.Tensor):
        assert isinstance(theirs, torch.Tensor), key
        assert ours.dtype == theirs.dtype, key
        assert torch.equal(ours, theirs), f"{key} differs"
    elif isinstance(ours, dict):
        assert isinstance(theirs, dict), key
        assert ours.keys() == theirs.keys(), key
        for name in ours:
            assert_identical(ours[name], theirs[name], f"{key}.{name}")
    elif isinstance(ours, (list, tuple)):
        assert isinstance(theirs, (list, tuple)), key
        assert len(ours) == len(theirs), key
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_identical(a, b, f"{key}[{index}]")
    else:
        assert ours == theirs, f"{key}: {ours!r} != {theirs!r}"


@pytest.mark.slow
def test_a_vendored_project_moves_to_runkit_and_its_old_runs_keep_working(tmp_path: Path) -> None:
    template = tmp_path / "template"
    project = make_project(template, template_repository(template), tmp_path / "projects")
    for name, old, new in EDITS:
        text = (project / name).read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} is not in {name} once"
        (project / name).write_text(text.replace(old, new), encoding="utf-8")
    (project / PRESET).parent.mkdir(parents=True)
    (project / PRESET).write_text(PRESET_TEXT, encoding="utf-8")
    commit_all(project, "the team's edits")
    old_tests = tmp_path / "old-tests"  # the stopped run's config names faults.SignalAtStep: the update deletes it
    old_tests.mkdir()
    shutil.copy2(project / "tests/faults.py", old_tests)

    with install(project):
        # Runs made with the kit inside the project.
        stopping = ("fit", *SMALL, "--run.name=stopped", SIGTERM_AT_STEP_5)
        output = succeeds(command(project, *stopping, path=project / "tests", bytecode=True), 143)
        assert "saved runs/debug/stopped/checkpoints/last.ckpt" in output
        succeeds(command(project, "fit", *SMALL, "--run.name=straight", bytecode=True))
        scoring = ("validate", "-c", "runs/debug/straight/config.yaml", "--ckpt_path", "best")
        scored = metrics(succeeds(command(project, *scoring, bytecode=True)))
        assert set(scored) == {"val/acc", "val/loss"}
        assert f"{PACKAGE}.kit.WarmupCosine" in (project / "runs/debug/stopped/config.yaml").read_text()
        succeeds(command(project, *SEARCH, "--trials", "2", bytecode=True))
        searched = trials(project)
        assert [(number, state) for number, state, _, _ in searched] == [(0, "COMPLETE"), (1, "COMPLETE")]
        assert f"{PACKAGE}.kit.WarmupCosine" in (project / "runs/debug/search/base.yaml").read_text()

        # The move: cruft update, then the one documented command.
        assert cruft(project, "check").returncode == 1
        updated = cruft(project, "update", "--skip-apply-ask")
        assert updated.returncode == 0, updated.stdout + updated.stderr
        assert_merged(project)
        assert not (project / KIT / "__init__.py").exists()
        assert not (project / "tests/faults.py").exists()
        assert list((project / KIT).rglob("*.py")) == []
        assert list((project / KIT).rglob("*.pyc")) != []  # the deleted kit's bytecode is left (ignored by git)
        for name, _, new in EDITS:
            assert new in (project / name).read_text(encoding="utf-8"), f"the team's edit of {name} is lost"
        assert (project / PRESET).read_text(encoding="utf-8") == PRESET_TEXT
        assert "class_path: runkit.WarmupCosine" in (project / "configs/example/model.yaml").read_text()
        commit_all(project, "the template's update: runkit")
        assert cruft(project, "check").returncode == 0
        installed = subprocess.run(
            [
                sys.executable,
                "-m",
                *documented_install(),
                "--no-deps",
                "--no-build-isolation",
                "--ignore-requires-python",
            ],
            cwd=project,
            capture_output=True,
            text=True,
        )  # --no-deps: this environment has runkit already, installed from this working tree
        assert installed.returncode == 0, installed.stderr
        importlib.invalidate_caches()
        requires = importlib.metadata.requires(PROJECT) or []
        assert [line for line in requires if line.startswith("runkit")] != []

        # The runs made before, with runkit.
        done = ["finished", "2", "8"]
        listed = {"trial-000": done, "trial-001": done}  # `runs` lists a search's trials too
        assert runs_table(project) == {"stopped": ["preempted", "1", "6"], "straight": done, **listed}
        output = succeeds(command(project, "validate", "--ckpt_path", "best"))
        assert "the newest run with a best.ckpt is runs/debug/straight" in output
        assert metrics(output) == scored  # the same numbers, to the last digit printed
        resumed = command(project, "fit", "-c", "runs/debug/stopped/config.yaml", "--ckpt_path", "last", path=old_tests)
        assert "resumed from runs/debug/stopped/checkpoints/last.ckpt" in succeeds(resumed)
        ours = torch.load(project / "runs/debug/stopped/checkpoints/last.ckpt", weights_only=True)
        reference = torch.load(project / "runs/debug/straight/checkpoints/last.ckpt", weights_only=True)
        for key in EXACT:
            assert_identical(ours[key], reference[key], key)
        assert runs_table(project) == {"stopped": done, "straight": done, **listed}
        output = succeeds(command(project, *SEARCH_AFTER, "--trials", "3"))
        assert "3/3 done" in output
        continued = trials(project)
        assert continued[:2] == searched
        assert [(number, state) for number, state, _, _ in continued[2:]] == [(2, "COMPLETE")]
        mark = (project / "runs/debug/search/trial-002/study.yaml").read_text()
        assert mark.endswith(f"study: {study(project).user_attrs['uid']}\n")
        assert "runkit.WarmupCosine" in (project / "runs/debug/search/base.yaml").read_text()
        assert ".kit." not in (project / "runs/debug/search/best.yaml").read_text()

        assert_tests_pass(project, *SMOKE_TESTS)


@pytest.mark.slow
def test_an_edited_kit_file_is_carried_over_and_deleted_before_the_update(tmp_path: Path) -> None:
    """CHANGELOG.md: an edit in a file the update deletes turns the whole update into `.rej` files; the team's
    deletion first, as it says, lets cruft update cleanly."""
    template = tmp_path / "template"
    first = template_repository(template)
    for way in ("as it is", "deleted first"):
        project = make_project(template, first, tmp_path / way)
        schedules = project / KIT / "parts/schedules.py"
        schedules.write_text(schedules.read_text().replace("start_factor: float = 0.01", "start_factor: float = 0.1"))
        edit = project / EDITS[0][0]  # an edit near a line the update changes
        edit.write_text(edit.read_text().replace(EDITS[0][1], EDITS[0][2]))
        commit_all(project, "the team's edits")
        if way == "deleted first":
            git(project, "rm", "-r", "--quiet", KIT)
            git(project, "commit", "--quiet", "--message=the kit's edit carried over: its files deleted")
        updated = cruft(project, "update", "--skip-apply-ask")
        assert updated.returncode == 0, updated.stderr
        rejected = sorted(str(path.relative_to(project)) for path in project.rglob("*.rej"))
        if way == "as it is":
            assert rejected == ["configs/example/model.yaml.rej"]
            assert schedules.is_file()
        else:
            assert rejected == []
            assert_merged(project)
            assert not (project / KIT).exists()
            assert EDITS[0][2] in edit.read_text()
