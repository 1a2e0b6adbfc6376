"""Stopping DDP runs as clusters do: a signal to every rank, to one torchrun "node" of two, and SLURM's requeue
signal to the tasks of a 2-task job. Every process stops at the same step, the checkpoint is written once, all
exit within ``EXIT_BOUND_S``, and the resume ends bit-identical to a 2-process run that never stopped. (The
fault matrix covers a signal to rank 0 and to the process group.) And a process lost for good (SIGKILL): one line
names it, and the last checkpoint is kept."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import PACKAGE, ROOT, TEMPLATE
from test_fault_matrix import EXIT_BOUND_S, assert_same_training, finish, group_gone_at, start

from runkit.testing.faults import fault
from runkit.testing.support import child_path, last_checkpoint, launch, run_dir_flags

pytestmark = [pytest.mark.slow, pytest.mark.faults]
DDP = ["--trainer.devices=2", "--trainer.strategy=ddp"]
STEPS = 16  # fixture.yaml on 2 processes: 2 epochs of 8 batches each


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("straight")
    run = cwd / "runs" / "fixture" / "straight"
    assert finish(start(cwd, *run_dir_flags(run), *DDP), cwd) == 0, (cwd / "out.log").read_text()[-3000:]
    return last_checkpoint(run)


def environment(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return {**env, "PACKAGE": PACKAGE, **extra}  # what the template's scripts run: `python -m runkit`


def statuses(run: Path) -> list[tuple[str, str | None]]:
    sessions = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
    return [(session["status"], session.get("signal")) for session in sessions]


def test_sigterm_to_every_rank_stops_all_at_one_step(straight: dict[str, Any], tmp_path: Path) -> None:
    run, report = tmp_path / "runs" / "fixture" / "cut", tmp_path / "sent.json"
    sigterm = int(signal.SIGTERM)
    signalled = fault("SignalFromOutside", phase="train", signum=sigterm, target="ranks", report=str(report))
    process = start(tmp_path, *run_dir_flags(run), *DDP, "--data.init_args.num_workers=2", signalled)
    assert finish(process, tmp_path) == 143, (tmp_path / "out.log").read_text()[-4000:]
    sent = json.loads(report.read_text())
    assert len(sent["pids"]) == 2
    assert group_gone_at(sent["pgid"], sent["sent"] + EXIT_BOUND_S) - sent["sent"] <= EXIT_BOUND_S
    assert last_checkpoint(run)["global_step"] == 6  # the step in progress on both, then saved once
    assert finish(start(tmp_path, *run_dir_flags(run), *DDP, "--ckpt_path=last"), tmp_path) == 0
    assert_same_training(last_checkpoint(run), straight)
    assert statuses(run) == [("preempted", "SIGTERM"), ("finished", None)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def torchrun_nodes(cwd: Path, *args: str) -> list[subprocess.Popen[bytes]]:
    """Two torchrun "nodes" on this host, one process each, each node in a session of its own."""
    endpoint = f"localhost:{free_port()}"
    env = environment(NNODES="2", NPROC_PER_NODE="1", RDZV_ENDPOINT=endpoint, RDZV_ID="stops", PYTHON=sys.executable)
    command = [str(TEMPLATE / "scripts" / "torchrun.sh"), "fit", "--trainer.accelerator=cpu", "--trainer.strategy=ddp"]
    nodes = []
    for node in range(2):
        with open(cwd / f"node{node}.log", "ab") as log:
            nodes.append(
                subprocess.Popen(
                    [*command, *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
    return nodes


def test_sigterm_to_one_torchrun_node_stops_both_nodes_and_resumes_exactly(
    straight: dict[str, Any], tmp_path: Path
) -> None:
    run, report = tmp_path / "runs" / "fixture" / "two-nodes", tmp_path / "sent.json"
    # A scheduler reclaims one node: its torchrun agent and its training process get SIGTERM (the node that
    # runs rank 0; which one that is, the rendezvous decides); the other node learns it at the next step boundary.
    sigterm = int(signal.SIGTERM)
    signalled = fault("SignalFromOutside", phase="train", signum=sigterm, target="node", report=str(report))
    nodes = torchrun_nodes(tmp_path, *run_dir_flags(run), signalled)
    codes = [node.wait(timeout=300) for node in nodes]
    logs = "\n".join((tmp_path / f"node{n}.log").read_text()[-3000:] for n in range(2))
    sent = json.loads(report.read_text())
    # Each training process exits 143; torchrun reports a child that did not exit 0 as a failure of its own (1).
    assert codes == [1, 1], logs
    assert "failed (exitcode: 143)" in logs
    for node in nodes:
        assert group_gone_at(node.pid, sent["sent"] + EXIT_BOUND_S) - sent["sent"] <= EXIT_BOUND_S
    # Sent after step 5's backward: the stop comes at the next boundary (6) when the signal reaches the training
    # process at once, later when the node's torchrun agent forwards it first (steps take ~80 ms; seen: 7, under
    # load). Both nodes stop at the same step either way: one checkpoint, and the resume below is exact.
    assert 6 <= last_checkpoint(run)["global_step"] < 16, logs
    assert statuses(run) == [("preempted", "SIGTERM")]

    resumed = torchrun_nodes(tmp_path, *run_dir_flags(run), "--ckpt_path=last")
    assert [node.wait(timeout=300) for node in resumed] == [0, 0]
    assert_same_training(last_checkpoint(run), straight)


FAKE_SRUN = """#!/bin/bash
# srun for one node: start SLURM_NTASKS tasks here, each with its SLURM_PROCID, and wait for them all.
pids=()
for ((task = 0; task < SLURM_NTASKS; task++)); do
    SLURM_PROCID=$task SLURM_LOCALID=$task "$@" &
    pids+=($!)
done
code=0
for pid in "${pids[@]}"; do wait "$pid" || code=$?; done
exit $code
"""


def test_slurm_requeue_signal_to_both_tasks_stops_requeues_and_the_requeued_job_resumes(
    straight: dict[str, Any], tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "scontrol").write_text('#!/bin/bash\necho "$@" >> "$SCONTROL_LOG"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    (tmp_path / "src").symlink_to(ROOT / "src")
    job = str(4000 + free_port() % 1000)  # Lightning's SLURM environment derives the DDP port from the job id
    env = environment(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHON=sys.executable,
        SCONTROL_LOG=str(tmp_path / "scontrol.log"),
        SLURM_JOB_ID=job,
        SLURM_JOB_NAME="train",
        SLURM_NNODES="1",
        SLURM_NTASKS="2",
        SLURM_NTASKS_PER_NODE="2",
        SLURM_NODELIST="localhost",
        SLURM_NODEID="0",
    )
    run, report = tmp_path / "runs" / "fixture" / f"slurm-{job}", tmp_path / "sent.json"
    # `--signal=SIGUSR1@120`: SLURM signals every task of the job step, not the batch script.
    sigusr1 = int(signal.SIGUSR1)
    signalled = fault("SignalFromOutside", phase="validation", signum=sigusr1, target="ranks", report=str(report))
    sbatch = ["bash", str(TEMPLATE / "scripts" / "slurm.sbatch"), "--trainer.strategy=ddp"]
    first = subprocess.run([*sbatch, signalled], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 128 + signal.SIGUSR1, first.stdout[-2000:] + first.stderr[-3000:]
    assert (tmp_path / "scontrol.log").read_text() == f"requeue {job}\n"  # once, by rank 0
    assert last_checkpoint(run)["global_step"] == 8  # epoch 0 trained, stopped in its validation
    requeued = subprocess.run(
        sbatch, cwd=tmp_path, env={**env, "SLURM_RESTART_COUNT": "1"}, capture_output=True, text=True, timeout=300
    )
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    assert_same_training(last_checkpoint(run), straight)
    assert statuses(run) == [("preempted", "SIGUSR1"), ("finished", None)]


def test_a_process_killed_for_good_is_named_in_one_line_and_the_last_checkpoint_kept(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fixture" / "lost"
    kill = fault("SignalAtStep", step=10, signum=int(signal.SIGKILL), rank=1)  # in epoch 2: last.ckpt is at step 8
    done = launch(PACKAGE, "fit", *DDP, *run_dir_flags(run), kill, cwd=tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "Traceback" not in done.stdout, done.stdout[-3000:]
    assert done.stdout.strip().splitlines()[-1] == (
        f"error: process 1 of 2 (local rank 1) killed by SIGKILL at step 10: the run stopped, its record says failed;"
        f" {run}/checkpoints/last.ckpt is kept: continue with --ckpt_path last"
    )
    assert statuses(run) == [("failed", None)]
    assert last_checkpoint(run)["global_step"] == 8
