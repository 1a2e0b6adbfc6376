"""A run's own config.yaml names the run by the folder it is in; an evaluation of ``best``/``last`` with no run named
reads the newest run's config, in any experiment (``run/config.py``)."""

from __future__ import annotations

import shutil
import signal
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from runkit.testing.faults import fault
from runkit.testing.support import fit_exit_code, last_checkpoint, refused

SHORT = ["--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1"]  # 8 steps in the fixture's 2 epochs
TEAM_MODEL = ["--model=fixture_task.CollectiveRegressor", "--model.init_args.hidden=8"]  # not the default config's
STOP_AT_STEP_3 = fault("SignalAtStep", step=3, signum=int(signal.SIGTERM))


def statuses(run: Path) -> list[str]:
    return [session["status"] for session in yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]]


@pytest.fixture
def stopped(cli: ModuleType, in_tmp: Path) -> Path:
    """A run stopped by SIGTERM at step 3: ``runs/fixture/a``."""
    run = in_tmp / "runs" / "fixture" / "a"
    assert fit_exit_code(cli, run, *SHORT, STOP_AT_STEP_3) == 128 + signal.SIGTERM
    assert last_checkpoint(run)["global_step"] == 3
    return run


def test_a_copied_run_folder_resumes_the_copy_and_leaves_the_original(cli: ModuleType, stopped: Path) -> None:
    copy = stopped.parent / "b"
    shutil.copytree(stopped, copy)  # its config.yaml still says `run.name: a`
    before = (stopped / "checkpoints" / "last.ckpt").read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli.build_cli(["fit", f"--config={copy / 'config.yaml'}", "--ckpt_path=last"])
    # Lightning's ModelCheckpoint drops the best score of a state saved in another folder, and says so.
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]
    assert last_checkpoint(copy)["global_step"] == 8
    assert statuses(copy) == ["preempted", "finished"]
    best = last_checkpoint(copy)["callbacks"]["BestCheckpoint"]  # its ranking came along, its paths follow the copy
    assert best["best_model_path"] == str(copy / "checkpoints" / "best.ckpt")
    assert best["best_model_score"] is not None
    assert (stopped / "checkpoints" / "last.ckpt").read_bytes() == before
    assert statuses(stopped) == ["preempted"]


def test_a_moved_run_folder_resumes_where_it_is_now(cli: ModuleType, stopped: Path) -> None:
    moved = stopped.parents[2] / "elsewhere" / "fixture" / "a"  # its config.yaml says `default_root_dir: <...>/runs`
    shutil.copytree(stopped, moved)
    cli.build_cli(["fit", f"--config={moved / 'config.yaml'}", "--ckpt_path=last"])
    assert last_checkpoint(moved)["global_step"] == 8
    assert statuses(stopped) == ["preempted"]


def test_a_flag_naming_another_run_than_the_config_folder_is_refused(
    cli: ModuleType, stopped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = stopped.parent / "b"
    shutil.copytree(stopped, copy)
    line = refused(capsys, lambda: cli.build_cli(["fit", f"--config={copy / 'config.yaml'}", "--run.name=a"]))
    assert line == (
        f"error: --run.name a names another run than {copy}, whose config.yaml this command reads: drop the flag"
        " (the folder that holds config.yaml is the run), or pass another run's config"
    )
    assert statuses(stopped) == statuses(copy) == ["preempted"]


def test_validate_best_takes_the_newest_run_of_any_experiment_with_its_own_model(cli: ModuleType, in_tmp: Path) -> None:
    # A team's own model in its own experiment; the default config names another model and experiment.
    team = in_tmp / "runs" / "team" / "narrow"
    assert fit_exit_code(cli, team, *SHORT, *TEAM_MODEL) == 0
    older = in_tmp / "runs" / "fixture" / "older"
    older.parent.mkdir(parents=True)
    validated = cli.build_cli(["validate", "--ckpt_path=best"])
    assert (type(validated.model).__name__, validated.model.hparams.hidden) == ("CollectiveRegressor", 8)
    assert validated.trainer.ckpt_path == str(team / "checkpoints" / "best.ckpt")


def test_an_experiment_named_by_the_command_keeps_validate_best_within_it(
    run_cli: Callable[..., object], cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fit_exit_code(cli, in_tmp / "runs" / "team" / "narrow", *SHORT, *TEAM_MODEL) == 0
    line = refused(capsys, lambda: run_cli("validate", "--ckpt_path=best", "--run.experiment=fixture"))
    assert line.startswith("error: --ckpt_path best: no runs/fixture/<run>/checkpoints/best.ckpt")
