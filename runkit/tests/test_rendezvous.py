"""A multi-node run needs a launcher, and a stop signal ends the wait for a node that never comes (issue 33, item 1):
``--trainer.num_nodes 2`` alone hung for 749 s, deaf to SIGTERM and Ctrl-C, and left its run with ``status: null``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support import PACKAGE

from runkit.testing.support import child_path, refused


def test_num_nodes_without_a_launcher_is_one_line_and_leaves_no_run(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, in_tmp: Path
) -> None:
    for name in ("NODE_RANK", "GROUP_RANK", "SLURM_NTASKS", "LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    # Refused before the processes meet (it waited for node 1 for ever: the test would hang).
    line = refused(capsys, lambda: run_cli("fit", "--trainer.num_nodes=2", "--trainer.default_root_dir=runs"))
    assert line.startswith("error: trainer.num_nodes: 2 nodes, but no launcher"), line
    assert "torchrun --nnodes 2" in line
    assert not list(Path("runs").rglob("provenance.yaml"))  # the run folder made for it is taken back


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("signum", "target", "devices"),
    [(signal.SIGTERM, "group", 1), (signal.SIGINT, "pid", 1), (signal.SIGTERM, "pid", 2)],
    ids=["group-SIGTERM", "pid-Ctrl-C", "pid-SIGTERM-2-processes"],
)
def test_a_stop_signal_ends_the_wait_for_a_node_that_never_comes(
    in_tmp: Path, signum: int, target: str, devices: int
) -> None:
    # Node 0 of 2 with the rank set by hand, as on a cluster without a launcher; node 1 never starts.
    env = {
        **os.environ,
        "PYTHONPATH": child_path(),
        "PYTHONWARNINGS": "ignore",
        "NODE_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    command = [sys.executable, "-m", PACKAGE, "fit", "--trainer.num_nodes=2", f"--trainer.devices={devices}"]
    command.append("--trainer.default_root_dir=runs")
    log = in_tmp / "out.log"
    with open(log, "w") as out:
        job = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        # Lightning's line as the process group is made: the process is in the wait from then on.
        # With 2 processes on this node, the one Lightning started must be in the wait too.
        while f"MEMBER: {devices}/{2 * devices}" not in log.read_text():
            assert job.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"never reached the rendezvous: {log.read_text()}"
            time.sleep(0.2)
        os.killpg(job.pid, signum) if target == "group" else os.kill(job.pid, signum)
        assert job.wait(timeout=60) == 128 + signum, log.read_text()
        # Each process of the node says it, the one this one started too (it got the signal from its parent).
        name = signal.Signals(signum).name
        while len([line for line in log.read_text().splitlines() if line.startswith(f"{name}: stopped")]) < devices:
            assert time.monotonic() < deadline, f"waited for {devices} processes to stop: {log.read_text()}"
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # what is left of the group (a process started by the job)
    output = log.read_text()
    assert output.strip().splitlines()[-1].startswith(f"{name}: stopped while process"), output
    assert "Traceback" not in output
    (record,) = Path("runs").rglob("provenance.yaml")
    session = yaml.safe_load(record.read_text())["sessions"][-1]
    assert session["status"] == ("preempted" if signum == signal.SIGTERM else "interrupted")
    assert session["signal"] == name
