"""``search`` across processes: signals and killed workers lose no trial and count none twice; workers on several
machines share a study in PostgreSQL."""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import servers
import torch
import yaml
from support import PACKAGE

from runkit.testing.support import child_path

optuna = pytest.importorskip("optuna", reason="the search needs the project's `search` extra (Optuna)")
TrialState = optuna.trial.TrialState

SEARCH = Path("runs/fixture/search")
SPACE = {"model.lr": {"float": [1.0e-3, 1.0e-1], "log": True}, "model.hidden": {"int": [8, 48], "step": 8}}
# Longer trials than the fixture's (32 steps an epoch), with last.ckpt every 4 steps to interrupt them at.
ARGS = ["--config=space.yaml", "--data.init_args.train_size=512", "--last_checkpoint.every_n_train_steps=4"]
ARGS += ["--heartbeat_interval=1"]
PATIENCE = 1800
"""Seconds to wait for any one event (a checkpoint written, a search ended): seconds on a quiet machine, and far more
than a machine 10x slower needs. Giving up names the event and shows the search's threads and the end of its log."""


@pytest.fixture
def space(in_tmp: Path) -> Path:
    (in_tmp / "space.yaml").write_text(yaml.safe_dump({"space": SPACE}))
    return in_tmp


def start(*args: str, log: str = "out.log") -> subprocess.Popen[bytes]:
    """Starts ``python -m <package> search *args`` (output to ``log``); the fixture task imports in it.

    With faulthandler on, SIGABRT makes it print every thread's stack first (see ``gave_up``).
    """
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore", "PYTHONFAULTHANDLER": "1"}
    with open(log, "w") as out:  # a file, not a pipe: see support.launch
        # SIGINT as a terminal delivers it, even when this test runs where SIGINT is ignored.
        return subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "search", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def written(pattern: str) -> set[tuple[str, int, int]]:
    """The files matching ``pattern`` as they are now: a checkpoint written over (``os.replace``) is another one."""
    found = set()
    for name in glob.glob(pattern):
        with contextlib.suppress(FileNotFoundError):
            stat = os.stat(name)
            found.add((name, stat.st_ino, stat.st_mtime_ns))
    return found


def wait_for_checkpoint(
    process: subprocess.Popen[bytes], pattern: str, before: set[tuple[str, int, int]], log: str = "out.log"
) -> Path:
    """The first file matching ``pattern`` that is not one of ``before`` (``written``), while ``process`` runs."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if new := written(pattern) - before:
            return Path(min(new)[0])
        if process.poll() is not None:
            raise AssertionError(
                f"the search ended ({process.returncode}) before it wrote {pattern}:\n{Path(log).read_text()[-3000:]}"
            )
        time.sleep(0.01)
    raise gave_up(process, f"the search to write {pattern}", log)


def finish(process: subprocess.Popen[bytes], waiting_for: str, log: str = "out.log") -> tuple[int, str]:
    """The exit code and output of ``process``, once it ends (``waiting_for`` says what should end it)."""
    try:
        return process.wait(PATIENCE), Path(log).read_text()
    except subprocess.TimeoutExpired:
        raise gave_up(process, waiting_for, log) from None


def gave_up(process: subprocess.Popen[bytes], waiting_for: str, log: str) -> AssertionError:
    """Ends ``process``, its threads' stacks printed into ``log`` (faulthandler, on SIGABRT); the error to raise."""
    if process.poll() is None:
        process.send_signal(signal.SIGABRT)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    tail = Path(log).read_text()[-20000:]  # the stacks, most recent call first
    return AssertionError(f"waited {PATIENCE} s for {waiting_for}; gave up. {log} ends:\n{tail}")


def load_study(storage: str | None = None, name: str = "search") -> optuna.Study:
    if storage is None:
        backend = optuna.storages.journal.JournalFileBackend(str(SEARCH / "study.log"))
        return optuna.load_study(study_name=name, storage=optuna.storages.JournalStorage(backend))
    return optuna.load_study(study_name=name, storage=storage)


@pytest.mark.slow
def test_sigterm_ctrl_c_and_sigkill_stop_a_trial_that_resumes_and_counts_once(space: Path, cli: ModuleType) -> None:
    last = str(SEARCH / "trial-000" / "checkpoints" / "last.ckpt")
    # SIGTERM: the running trial saves at the next step and the worker exits 143, its trial queued again.
    search = start(*ARGS, "--trials=2")
    wait_for_checkpoint(search, last, before=set())
    search.send_signal(signal.SIGTERM)
    code, out = finish(search, "the search to exit on SIGTERM")
    assert code == 143, out[-3000:]
    assert "trial 0 stopped: saved in runs/fixture/search/trial-000" in out
    trials = load_study().get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[1].system_attrs["failed_trial"] == 0
    # Ctrl-C: the same, exit 130 and the table so far.
    before = written(last)
    search = start(*ARGS, "--trials=2")
    wait_for_checkpoint(search, last, before)
    search.send_signal(signal.SIGINT)
    code, out = finish(search, "the search to exit on Ctrl-C")
    assert code == 130, out[-3000:]
    assert "rank  trial  state" in out
    assert "trial 1 stopped" in out
    # SIGKILL: nothing runs any more; the trial stays "running" in the study until a worker finds its process gone.
    before = written(last)
    search = start(*ARGS, "--trials=2")
    wait_for_checkpoint(search, last, before)
    search.kill()
    assert finish(search, "the search to die of SIGKILL")[0] == -signal.SIGKILL
    assert [t.state for t in load_study().get_trials()][-1] == TrialState.RUNNING
    # Restarted, the study goes on: the killed trial is failed and run again, then the second trial; nothing else.
    code, out = finish(start(*ARGS, "--trials=2"), "the restarted search to run the killed trial and the second")
    assert code == 0, out[-3000:]
    trials = load_study().get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] * 3 + [TrialState.COMPLETE] * 2
    assert trials[3].system_attrs["retry_history"] == [0, 1, 2]
    assert all(t.params == trials[0].params for t in trials[:4])
    assert sorted(path.name for path in SEARCH.glob("trial-*")) == ["trial-000", "trial-004"]
    assert torch.load(last, weights_only=True)["global_step"] == 64  # two epochs of 32 steps, in four processes
    # Each restart resumed the trial from its last.ckpt (as `fit --ckpt_path last`) rather than starting it over.
    log = (SEARCH / "trial-000" / "fit.log").read_text()
    assert log.count("Restored all states from the checkpoint at runs/fixture/search/trial-000") == 3
    # Stopped three times and resumed each time, the trial ends exactly where one uninterrupted fit ends.
    values = [f"--{key}={value}" for key, value in trials[3].params.items()]
    straight = cli.build_cli(["fit", f"--config={SEARCH / 'base.yaml'}", *values, "--run.name=straight"])
    assert float(straight.trainer.checkpoint_callback.best_model_score) == trials[3].value


@pytest.mark.slow
def test_two_workers_share_the_journal_and_a_killed_one_s_trial_is_run_again(space: Path) -> None:
    search = start(*ARGS, "--trials=3", "--workers=2")
    first = wait_for_checkpoint(search, str(SEARCH / "trial-*" / "checkpoints" / "last.ckpt"), before=set())
    number = int(first.parent.parent.name.removeprefix("trial-"))
    worker = load_study().get_trials()[number].system_attrs["heartbeat"]["pid"]
    assert worker != search.pid
    os.kill(worker, signal.SIGKILL)
    code, out = finish(search, "the search to run the killed worker's trial again and finish its 3 trials")
    assert code == 0, out[-3000:]
    assert "died (SIGKILL)" in out
    trials = load_study().get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 3
    (failed,) = [t for t in trials if t.state == TrialState.FAIL]
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == failed.number]
    assert (failed.number, retry.params, retry.state) == (number, failed.params, TrialState.COMPLETE)
    assert len({t.system_attrs["heartbeat"]["pid"] for t in trials}) == 2  # both workers ran trials


@pytest.fixture
def postgres() -> Iterator[str]:
    """A PostgreSQL server of its own (see servers.py); its URL."""
    with servers.postgres() as url:
        yield url


@pytest.mark.faults  # make test-faults: a PostgreSQL server; the journal file's workers stay in make test
@pytest.mark.slow
def test_workers_on_two_machines_join_one_study_in_postgresql(space: Path, postgres: str) -> None:
    # Two commands with run directories of their own stand for two machines; the study's name joins them.
    common = ["--config=space.yaml", f"--storage={postgres}", "--trials=4", "--heartbeat_interval=1"]
    machines = {name: start(*common, f"--trainer.default_root_dir={name}", log=f"{name}.log") for name in "ab"}
    results = {name: finish(process, "its 4 trials to end", f"{name}.log") for name, process in machines.items()}
    for code, out in results.values():
        assert code == 0, out[-3000:]
        assert f"study in {postgres}" in out
        assert len([line for line in out.splitlines() if " complete " in f" {line} "]) == 4  # the table: every trial
    trials = load_study(postgres).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    run_dirs = sorted(path.name for path in Path().glob("[ab]/fixture/search/trial-*"))
    assert run_dirs == [f"trial-{n:03d}" for n in range(4)]  # each trial ran once, on one of the machines
