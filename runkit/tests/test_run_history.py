"""A run's history is only ever extended: only its ``last`` continues it, one process at a time, with its own model.

``fit`` from a run's best (or any checkpoint but the run's own ``last``) starts a new run that names its parent and
leaves every byte of the source as it was. A second process continuing a run is refused while the first lives,
and takes over once it is dead. A resume honours what it may change (the Trainer) and refuses, naming the keys,
what would change the model its checkpoint holds: LightningCLI built the checkpoint's model without a word.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import PACKAGE

from runkit.testing.faults import fault
from runkit.testing.support import child_path, digest, refused, run_dir_flags

SOURCE = Path("runs/fixture/source")
STEP_LR = "--model.init_args.schedule=step"  # by epoch: a run may go on for more epochs (a one-cycle one may not)


@pytest.fixture
def source(cli: ModuleType, in_tmp: Path) -> Path:
    """A finished run of the fixture task: 2 epochs, best.ckpt from the better one."""
    cli.build_cli(["fit", *run_dir_flags(SOURCE), STEP_LR])
    return SOURCE


def sessions(run: Path) -> list[dict[str, object]]:
    return yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]


@pytest.mark.parametrize("how", ["alias", "path"])
def test_fine_tuning_from_best_starts_a_new_run_and_leaves_the_source_untouched(
    cli: ModuleType, source: Path, how: str
) -> None:
    before = digest(source)
    best = torch.load(source / "checkpoints/best.ckpt", weights_only=True)
    path = f"--ckpt_path={source}/checkpoints/best.ckpt"
    ckpt = ["--run.name=source", "--ckpt_path=best"] if how == "alias" else [path]
    tuned = cli.build_cli(["fit", *ckpt, STEP_LR, "--trainer.max_epochs=3"])
    assert digest(source) == before  # no checkpoint, event, provenance or config byte of the source changed
    (new,) = [run for run in Path("runs/fixture").iterdir() if run.name != "source"]
    assert Path(tuned.trainer.log_dir).absolute() == new.absolute()
    record = yaml.safe_load((new / "provenance.yaml").read_text())
    assert record["parent"] == {
        "run": "fixture/source",
        "checkpoint": str(source / "checkpoints/best.ckpt"),
        "epoch": best["epoch"],
        "step": best["global_step"],
    }
    assert torch.load(new / "checkpoints/last.ckpt", weights_only=True)["global_step"] == 16 * 3


def test_a_run_s_last_by_path_with_another_name_starts_a_new_run(cli: ModuleType, source: Path) -> None:
    before = digest(source)
    last = f"--ckpt_path={source}/checkpoints/last.ckpt"
    cli.build_cli(["fit", last, "--run.name=branch", STEP_LR, "--trainer.max_epochs=3"])
    assert digest(source) == before
    assert yaml.safe_load(Path("runs/fixture/branch/provenance.yaml").read_text())["parent"]["run"] == "fixture/source"


def test_a_resume_honours_the_trainer_and_refuses_another_model_naming_the_keys(
    cli: ModuleType, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(source)
    resume = ["fit", *run_dir_flags(source), "--ckpt_path=last", STEP_LR]
    line = refused(capsys, lambda: cli.main([*resume, "--model.init_args.hidden=64", "--model.init_args.dropout=0.5"]))
    assert line == (
        f"error: --ckpt_path {source}/checkpoints/last.ckpt continues run {source} with the model and data class its"
        " checkpoint holds; this command asks for others: model.init_args.dropout (0.5; the checkpoint's: 0.1);"
        " model.init_args.hidden (64; the checkpoint's: 32). Drop them to continue the run, or start a new run from"
        f" the checkpoint: --ckpt_path {source}/checkpoints/last.ckpt --run.name NEW"
    )
    line = refused(capsys, lambda: cli.main([*resume, "--model=fixture_task.LinearRegressor"]))
    expected = "model.class_path ('fixture_task.LinearRegressor'; the checkpoint's: 'fixture_task.SequenceRegressor')"
    assert expected in line
    assert digest(source) == before  # refused before anything is written
    resumed = cli.build_cli([*resume, "--trainer.max_epochs=3", "--trainer.log_every_n_steps=4"])  # may change
    assert resumed.trainer.global_step == 16 * 3
    assert [s["status"] for s in sessions(source)] == ["finished", "finished"]


def start_fit(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore"}
    with open(cwd / "first.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", PACKAGE, "fit", *args], cwd=cwd, env=env, stdout=log, stderr=log)


@pytest.mark.slow  # a second process
def test_two_resumes_of_one_run_one_is_refused_and_a_dead_holder_is_taken_over(
    cli: ModuleType, source: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resume = [*run_dir_flags(source), "--ckpt_path=last", STEP_LR, "--trainer.max_epochs=4"]
    first = start_fit(in_tmp, *resume, fault("SleepEachStep", seconds=0.5))
    lock = source / ".lock"
    deadline = time.time() + 120
    while not (lock.exists() and (source / "provenance.yaml").read_text().count("started:") == 2):
        assert first.poll() is None, (in_tmp / "first.log").read_text()[-3000:]
        assert time.time() < deadline
        time.sleep(0.2)
    line = refused(capsys, lambda: cli.main(["fit", *resume]))  # a requeued job while the first still runs
    assert line.startswith(f"error: run {source} is being written by process {first.pid} on ")
    assert len(sessions(source)) == 2  # the refused one appended no session
    first.send_signal(signal.SIGKILL)  # the holder dies (a lost node)
    first.wait(timeout=60)
    taken = cli.build_cli(["fit", *resume])  # its lock is taken over
    assert taken.trainer.global_step == 16 * 4
    # The killed session recorded no end (`runs` shows it `killed`); the one that took over finished.
    assert [(s["status"], s["ended"] is None) for s in sessions(source)] == [
        ("finished", False),
        (None, True),
        ("finished", False),
    ]
    assert not lock.exists()


def test_a_lock_held_on_another_host_is_taken_over_once_it_stops_being_refreshed(tmp_path: Path) -> None:
    run_lock = __import__("runkit.run.lock", fromlist=["RunLock"])
    lock_file = tmp_path / ".lock"
    lock_file.write_text(yaml.safe_dump({"host": "elsewhere", "pid": 1, "since": "then"}))
    with pytest.raises(run_lock.RunLockedError, match="is being written by process 1 on elsewhere"):
        run_lock.RunLock(tmp_path).acquire()  # fresh: its holder may be alive
    old = time.time() - run_lock.STALE_S - 1
    os.utime(lock_file, (old, old))
    held = run_lock.RunLock(tmp_path)
    held.acquire()  # stale: taken over
    assert yaml.safe_load(lock_file.read_text())["pid"] == os.getpid()
    held.release()
    assert not lock_file.exists()


@pytest.mark.slow  # a second process
def test_a_run_folder_deleted_during_fit_is_one_line_and_exit_1(in_tmp: Path) -> None:
    run = in_tmp / "runs" / "fixture" / "deleted"
    fit = start_fit(in_tmp, *run_dir_flags(run), "--trainer.max_epochs=40", fault("SleepEachStep", seconds=0.05))
    deadline = time.time() + 120
    while not (run / "checkpoints" / "last.ckpt").exists():  # a first epoch written
        assert fit.poll() is None, (in_tmp / "first.log").read_text()[-3000:]
        assert time.time() < deadline
        time.sleep(0.2)
    while run.exists():  # a user's `rm -rf`, a cleanup job: again if fit wrote into a folder being removed
        shutil.rmtree(run, ignore_errors=True)
        assert time.time() < deadline, f"{run} could not be removed while fit ran"
    assert fit.wait(timeout=120) == 1
    output = (in_tmp / "first.log").read_text()
    expected = f"error: {run}: the run folder was deleted while fit ran; nothing more could be saved in it"
    assert output.strip().splitlines()[-1] == expected
    assert "Traceback" not in output
    assert not run.exists()  # nothing written again
