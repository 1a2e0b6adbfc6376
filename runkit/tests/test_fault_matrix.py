"""The fault matrix: every stop signal, sent the way clusters and terminals send it, at every phase of a run.

{signal} x {main pid, process group} x {0, 2, 2 persistent loader workers} x {train step, validation, checkpoint
write} x {1 process, 2 DDP processes}, and each 2-process cell again with a module that runs its own collective at
epoch end (``fixture_task.CollectiveRegressor``: a torchmetrics ``MetricCollection`` logged with ``sync_dist=True``,
as teams write it; the kit's own reads of the metrics must meet it in the same order on every process). Each cell
starts ``fit`` of the fixture task in a session of its own (as ``setsid``), has another process signal it (``kill -s
SIG <pid>`` or ``kill -s SIG -- -<pgid>``) at the phase, and checks: the exit code (128 + signal), that every
process of the job is gone within ``EXIT_BOUND_S`` of the signal, ``last.ckpt`` at the stop (loadable with
``weights_only``), the status and signal in ``provenance.yaml``, and that ``fit --ckpt_path last`` then ends
bit-identical to a run that never stopped.

``make test`` runs ``SLICE``, which covers every signal, target, phase, worker setting and process count at least
once; ``make test-faults`` runs every cell (``pytest --faults``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import PACKAGE

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, child_path, last_checkpoint, run_dir_flags

pytestmark = pytest.mark.slow

SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "HUP": signal.SIGHUP, "USR1": signal.SIGUSR1}
TARGETS = ("main", "group")
WORKERS = {
    "0w": [],
    "2w": ["--data.init_args.num_workers=2"],
    "2wp": ["--data.init_args.num_workers=2", "--data.init_args.persistent_workers=true"],
}
PHASES = ("train", "validation", "checkpoint")
PROCESSES = {"1p": [], "2p": ["--trainer.devices=2", "--trainer.strategy=ddp"]}
MODULES = {"plain": [], "collective": ["--model=fixture_task.CollectiveRegressor"]}  # the same weights, step by step
STATUS = {"TERM": "preempted", "USR1": "preempted", "HUP": "interrupted", "INT": "interrupted"}
EXIT_BOUND_S = 30.0  # from the signal to the last process of the job gone (1-3 s on an idle 2-core machine)
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")
TOTAL_STEPS = {"1p": 32, "2p": 16}  # fixture.yaml: 2 epochs of 16 batches, shared by the processes

CELLS = [
    *itertools.product(SIGNALS, TARGETS, WORKERS, PHASES, PROCESSES, ["plain"]),
    *itertools.product(SIGNALS, TARGETS, WORKERS, PHASES, ["2p"], ["collective"]),
]
SLICE = [  # every signal, target, phase, worker setting, process count and module kind at least once, in 4 cells
    ("TERM", "group", "2w", "train", "2p", "collective"),
    ("INT", "main", "0w", "validation", "1p", "plain"),
    ("HUP", "group", "2wp", "checkpoint", "1p", "plain"),
    ("USR1", "main", "2w", "train", "1p", "plain"),
]


def cell_params() -> list[Any]:
    return [pytest.param(*cell, id="-".join(cell), marks=() if cell in SLICE else pytest.mark.faults) for cell in CELLS]


def start(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    """``python -m <package> fit *args`` in a new session (its own process group), output to ``cwd/out.log``."""
    # faulthandler: a process that hangs prints where each of its threads is when the test aborts it.
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    env["PYTHONFAULTHANDLER"] = "1"
    with open(cwd / "out.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "fit", "--trainer.accelerator=cpu", *args],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish(process: subprocess.Popen[bytes], cwd: Path, timeout: float = 300) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)  # every process prints its threads' stacks (PYTHONFAULTHANDLER)
        time.sleep(3)
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"hung for {timeout} s:\n" + (cwd / "out.log").read_text()[-12000:]) from None


def group_gone_at(pgid: int, deadline: float) -> float:
    """When the last process of the group is gone (polling until ``deadline``)."""
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return time.time()
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)
    raise AssertionError(f"processes of group {pgid} still alive {EXIT_BOUND_S} s after the signal")


def assert_same_training(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    for key in EXACT:
        assert_identical(actual[key], expected[key], key)


def test_the_slice_make_test_runs_holds_every_value_of_every_dimension() -> None:
    dimensions = (SIGNALS, TARGETS, WORKERS, PHASES, PROCESSES, MODULES)
    for index, values in enumerate(dimensions):
        assert {cell[index] for cell in SLICE} == set(values), values
    assert set(SLICE) <= set(CELLS)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The final checkpoint of an uninterrupted run, per process count (loader workers and the module kind change
    nothing: the collective module trains the same weights)."""
    found = {}
    for name, flags in PROCESSES.items():
        cwd = tmp_path_factory.mktemp(f"straight-{name}")
        run = cwd / "runs" / "fixture" / "straight"
        assert finish(start(cwd, *run_dir_flags(run), *flags), cwd) == 0, (cwd / "out.log").read_text()[-3000:]
        found[name] = last_checkpoint(run)
        assert found[name]["global_step"] == TOTAL_STEPS[name]
    return found


@pytest.mark.parametrize(("sig", "target", "workers", "phase", "processes", "module"), cell_params())
def test_a_stop_signal_saves_records_exits_and_resumes_exactly(
    straight: dict[str, dict[str, Any]],
    tmp_path: Path,
    sig: str,
    target: str,
    workers: str,
    phase: str,
    processes: str,
    module: str,
) -> None:
    run, report = tmp_path / "runs" / "fixture" / "cell", tmp_path / "sent.json"
    flags = [*run_dir_flags(run), *WORKERS[workers], *PROCESSES[processes], *MODULES[module]]
    signum = int(SIGNALS[sig])
    injected = fault("SignalFromOutside", phase=phase, signum=signum, target=target, report=str(report))

    process = start(tmp_path, *flags, injected)
    code = finish(process, tmp_path)
    log = (tmp_path / "out.log").read_text()
    assert report.is_file(), f"the signal was never sent:\n{log[-3000:]}"
    sent = json.loads(report.read_text())
    gone = group_gone_at(sent["pgid"], sent["sent"] + EXIT_BOUND_S)
    assert code == 128 + signum, log[-4000:]
    assert gone - sent["sent"] <= EXIT_BOUND_S
    assert "Traceback" not in log, log[-4000:]

    stopped = last_checkpoint(run)
    assert 0 < stopped["global_step"] < TOTAL_STEPS[processes]
    if phase == "checkpoint":  # the epoch end's save: stopped before the next epoch (and its loader workers) started
        assert stopped["global_step"] == TOTAL_STEPS[processes] // 2, log[-4000:]
    session = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"][-1]
    assert (session["status"], session["signal"]) == (STATUS[sig], f"SIG{sig}")

    resumed = start(tmp_path, *flags, "--ckpt_path=last")
    assert finish(resumed, tmp_path) == 0, (tmp_path / "out.log").read_text()[-4000:]
    assert_same_training(last_checkpoint(run), straight[processes])
    sessions = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
    assert [s["status"] for s in sessions] == [STATUS[sig], "finished"]
