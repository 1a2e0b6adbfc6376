"""``sweep`` across processes: a group SIGTERM stops every cell saved and the same command finishes the sweep, none
trained twice and the resumed cells exact; workers started apart share a sweep in PostgreSQL; the SLURM array script
runs one worker per task."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import servers
import torch
import yaml
from support import PACKAGE, ROOT, TEMPLATE, submodule

from runkit.testing.faults import fault
from runkit.testing.support import child_path, digest

optuna = pytest.importorskip("optuna", reason="the sweep needs the project's `search` extra (Optuna)")
COMPLETE = optuna.trial.TrialState.COMPLETE
Plan = submodule("search.worker").Plan

SWEEP = Path("runs/fixture/sweep")
CELLS = ["small,seed_everything=1", "small,seed_everything=2", "wide,seed_everything=1", "wide,seed_everything=2"]
GRID = ["--grid=configs/small.yaml,configs/wide.yaml", "--grid=seed_everything=1,2"]
# Longer cells than the fixture's (32 steps an epoch), with last.ckpt every 4 steps to stop them at.
LONGER = ["--data.init_args.train_size=512", "--last_checkpoint.every_n_train_steps=4", "--heartbeat_interval=1"]
PATIENCE = 1800
"""Seconds to wait for any one event (a line, a file, an exit): far more than a machine 10x slower needs."""


@pytest.fixture
def presets(in_tmp: Path) -> Path:
    (in_tmp / "configs").mkdir()
    (in_tmp / "configs" / "small.yaml").write_text(yaml.safe_dump({"model": {"init_args": {"hidden": 8}}}))
    (in_tmp / "configs" / "wide.yaml").write_text(yaml.safe_dump({"model": {"init_args": {"hidden": 48}}}))
    return in_tmp


def start(*args: str, log: str = "out.log", env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Starts ``python -m <package> sweep *args`` in a process group of its own (output to ``log``)."""
    env = env or {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore", "PYTHONFAULTHANDLER": "1"}
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "sweep", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # as `setsid`: its pid is its group's id
        )


def wait_for(process: subprocess.Popen[bytes], what: str, ready: object, log: str = "out.log") -> None:
    """Waits until ``ready()`` is true while ``process`` runs; gives up naming ``what``."""
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        if process.poll() is not None:
            raise AssertionError(
                f"the sweep ended ({process.returncode}) before {what}:\n{Path(log).read_text()[-3000:]}"
            )
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    raise AssertionError(f"waited {PATIENCE} s for {what}; gave up. {log} ends:\n{Path(log).read_text()[-3000:]}")


def finish(process: subprocess.Popen[bytes], what: str, log: str = "out.log") -> tuple[int, str]:
    try:
        return process.wait(PATIENCE), Path(log).read_text()
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"waited {PATIENCE} s for {what}; {log} ends:\n{Path(log).read_text()[-3000:]}") from None


def study(storage: str | None = None, folder: Path = SWEEP) -> optuna.Study:
    if storage is None:
        backend = optuna.storages.journal.JournalFileBackend(str(folder / "study.log"))
        return optuna.load_study(study_name="sweep", storage=optuna.storages.JournalStorage(backend))
    return optuna.load_study(study_name="sweep", storage=storage)


def complete_cells(storage: str | None = None, folder: Path = SWEEP) -> list[str]:
    return sorted(t.user_attrs["cell"] for t in study(storage, folder).get_trials() if t.state == COMPLETE)


def completed_lines(log: str = "out.log") -> list[str]:
    return [line for line in Path(log).read_text().splitlines() if line.startswith("cell ") and " complete: " in line]


@pytest.mark.faults
def test_a_group_sigterm_stops_every_cell_and_the_same_command_finishes_the_sweep_exactly(
    presets: Path, cli: object
) -> None:
    command = [*GRID, *LONGER, "--workers=2"]
    sweep = start(*command)
    wait_for(sweep, "a first cell to complete", lambda: completed_lines())
    done = {line.split()[1] for line in completed_lines()}
    running = [SWEEP / cell for cell in CELLS if cell not in done]
    wait_for(sweep, "a running cell's last.ckpt", lambda: any((r / "checkpoints/last.ckpt").is_file() for r in running))
    os.killpg(sweep.pid, signal.SIGTERM)  # the whole group: the command and both workers
    code, out = finish(sweep, "the sweep to stop on SIGTERM")
    assert code == 143, out[-3000:]
    assert "stopped: saved in" in out
    finished = complete_cells()
    assert finished  # the first cell, at least
    stopped = [cell for cell in CELLS if cell not in finished and (SWEEP / cell / "checkpoints/last.ckpt").is_file()]
    assert stopped, out[-3000:]  # a cell stopped mid-run, saved
    untouched = {cell: digest(SWEEP / cell) for cell in finished}

    code, out = finish(start(*command, log="again.log"), "the same command to finish the sweep", "again.log")
    assert code == 0, out[-3000:]
    assert complete_cells() == sorted(CELLS)  # each cell complete once: none trained twice, none duplicated
    assert sorted(path.name for path in SWEEP.iterdir() if path.is_dir()) == sorted(CELLS)
    assert {cell: digest(SWEEP / cell) for cell in finished} == untouched  # finished cells not trained again
    for cell in CELLS:
        sessions = yaml.safe_load((SWEEP / cell / "provenance.yaml").read_text())["sessions"]
        assert sessions[-1]["status"] == "finished"
    for cell in stopped:  # resumed from last.ckpt, as `fit --ckpt_path last`
        assert (
            f"Restored all states from the checkpoint at {SWEEP / cell / 'checkpoints' / 'last.ckpt'}"
            in (SWEEP / cell / "fit.log").read_text()
        )
    # Stopped and resumed, a cell ends exactly where one uninterrupted fit of its config ends.
    cell = SWEEP / stopped[0]
    straight = cli.build_cli(["fit", f"--config={cell / 'cell.yaml'}", "--run.name=straight"])  # type: ignore[attr-defined]
    resumed = torch.load(cell / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    expected = straight.trainer.lightning_module.state_dict()
    assert resumed.keys() == expected.keys()
    assert all(torch.equal(resumed[key], expected[key]) for key in expected)
    # The table: a row per preset, the mean and std over the two seeds.
    rows = Path(SWEEP / "results.csv").read_text().splitlines()
    assert len(rows) == 3
    assert rows[1].startswith("small,2,2,")
    assert rows[2].startswith("wide,2,2,")


@pytest.mark.faults
def test_a_killed_worker_s_cell_is_run_again_from_its_last_checkpoint(presets: Path) -> None:
    sweep = start(*GRID, *LONGER, "--workers=2")
    pattern = [SWEEP / cell / "checkpoints" / "last.ckpt" for cell in CELLS]
    wait_for(sweep, "a cell's first last.ckpt", lambda: any(path.is_file() for path in pattern))
    (cell,) = [path.parent.parent.name for path in pattern if path.is_file()][:1]
    trial = next(t for t in study().get_trials() if t.user_attrs.get("cell") == cell)
    worker = trial.system_attrs["heartbeat"]["pid"]
    assert worker != sweep.pid
    os.kill(worker, signal.SIGKILL)  # a lost machine: no save, its cell left running in the study
    code, out = finish(sweep, "the sweep to run the killed worker's cell again and finish")
    assert code == 0, out[-3000:]
    assert "died (SIGKILL)" in out
    assert complete_cells() == sorted(CELLS)  # every cell complete once
    failed = [t for t in study().get_trials() if t.user_attrs.get("cell") == cell and t.state.name == "FAIL"]
    assert len(failed) == 1  # the killed run, marked failed when its worker was found gone, then run again
    log = (SWEEP / cell / "fit.log").read_text()
    assert f"Restored all states from the checkpoint at {SWEEP / cell / 'checkpoints' / 'last.ckpt'}" in log


@pytest.mark.faults
def test_two_workers_started_apart_share_one_sweep_in_postgresql(presets: Path) -> None:
    with servers.postgres() as url:
        # Cells of a few seconds (32 steps, 0.3 s each), so the second command, started after the first cell, finds
        # cells left to take however slow its start.
        heavier = [fault("SleepEachStep", seconds=0.3), "--heartbeat_interval=1", f"--storage={url}"]
        # Two commands with run folders of their own stand for two machines; the sweep's name joins them.
        first = start(*GRID, *heavier, "--trainer.default_root_dir=a", log="a.log")
        wait_for(first, "the first machine's first cell", lambda: completed_lines("a.log"), "a.log")
        second = start(*GRID, *heavier, "--trainer.default_root_dir=b", log="b.log")
        results = {name: finish(p, "the sweep to end", f"{name}.log") for name, p in (("a", first), ("b", second))}
        for code, out in results.values():
            assert code == 0, out[-3000:]
            assert "sweep a/fixture/sweep" in out or "sweep b/fixture/sweep" in out
        assert complete_cells(url) == sorted(CELLS)  # every cell once, on one machine or the other
        folders = {name: sorted(p.name for p in Path(name, "fixture/sweep").iterdir() if p.is_dir()) for name in "ab"}
        assert sorted(folders["a"] + folders["b"]) == sorted(CELLS)
        assert folders["a"]
        assert folders["b"]  # the second worker, started later, took cells too
        for _, out in results.values():  # each machine's table holds every cell, read from the shared study
            assert [line.split()[:2] for line in out.splitlines() if line.startswith(("small ", "wide "))] == [
                ["small", "2/2"],
                ["wide", "2/2"],
            ]


@pytest.mark.faults
def test_the_slurm_array_script_runs_one_worker_per_task(presets: Path) -> None:
    bin_dir = presets / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nexec "$@"\n')  # one task: run it here
    (bin_dir / "srun").chmod(0o755)
    (presets / "src").symlink_to(ROOT / "src")  # the script finds the package under src/ of the submit folder
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": child_path(),
        "PACKAGE": PACKAGE,
        "PYTHONWARNINGS": "ignore",
        "SLURM_ARRAY_JOB_ID": "4242",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "sweep",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NODELIST": "localhost",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
    }
    script = ["bash", str(TEMPLATE / "scripts" / "sweep.sbatch"), *GRID, "--heartbeat_interval=1"]
    tasks = []
    for task in range(3):  # one more task than the grid needs: it finds nothing left and exits 0
        with open(f"task-{task}.log", "w") as log:
            task_env = {**env, "SLURM_ARRAY_TASK_ID": str(task)}
            tasks.append(subprocess.Popen(script, stdout=log, stderr=subprocess.STDOUT, env=task_env))
    for task, process in enumerate(tasks):
        assert process.wait(PATIENCE) == 0, Path(f"task-{task}.log").read_text()[-3000:]
    assert complete_cells() == sorted(CELLS)
    ran = [len(completed_lines(f"task-{task}.log")) for task in range(3)]
    assert sum(ran) == len(CELLS)
    assert "job 4242 task 0" in Path("task-0.log").read_text()


@dataclasses.dataclass(frozen=True)
class DevicesSeen(Plan):
    """A plan whose worker writes the GPUs its process was started with (its name, its pid) and exits."""

    def open_study(self) -> tuple[object, object]:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        Path(f"{self.study_name}-{os.getpid()}.seen").write_text(seen)
        sys.exit(0)


@pytest.mark.faults  # two spawned interpreters importing torch: 31 s at load 12
def test_each_worker_process_starts_with_its_own_gpus(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No GPU needed: the share is the worker's environment from its start, which torch reads when it first uses CUDA.
    launch = submodule("search.launch")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6")
    settings = {"heartbeat_interval": 10, "grace_period": 60, "optuna_config": {}, "project": None}
    plan = DevicesSeen("probe", None, in_tmp, in_tmp / "base.yaml", (), "val/loss", "minimize", 1, **settings)
    assert launch.run_workers(plan, 2, ["3", "5", "6"]) == 0
    assert sorted(path.read_text() for path in in_tmp.glob("probe-*.seen")) == ["3", "5"]  # one GPU each, never shared
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,5,6"  # this process's own, as it was
