"""Multi-node DDP: two torchrun "nodes" on this host train exactly like two processes on one node."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import PACKAGE, TEMPLATE

from runkit.testing.support import child_path, run_dir_flags

FLAGS = ["fit", "--trainer.accelerator=cpu", "--trainer.strategy=ddp"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@pytest.mark.faults  # make test-faults: make test keeps runkit's one-node DDP tests (test_ddp.py)
@pytest.mark.slow
def test_two_torchrun_nodes_match_two_processes_on_one_node(in_tmp: Path) -> None:
    # One thread per process in both runs: Lightning gives each process cpus / local processes threads,
    # and a different thread count changes the order of float sums.
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
        "PYTHON": sys.executable,
        "PYTHONPATH": child_path(),  # the fixture task, in every process
        "PACKAGE": PACKAGE,  # what scripts/torchrun.sh runs
    }
    one_node = [sys.executable, "-m", PACKAGE, *FLAGS, "--trainer.devices=2", *run_dir_flags("runs/fixture/one")]
    single = subprocess.run(one_node, env=env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]

    endpoint = f"localhost:{free_port()}"
    node_env = {**env, "NNODES": "2", "NPROC_PER_NODE": "1", "RDZV_ENDPOINT": endpoint, "RDZV_ID": "test"}
    command = [str(TEMPLATE / "scripts" / "torchrun.sh"), *FLAGS, *run_dir_flags("runs/fixture/two")]
    nodes = [
        subprocess.Popen(command, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(output[-3000:] for output in outputs)
    assert "MEMBER: 2/2" in "".join(outputs)  # both nodes joined one world

    one = torch.load("runs/fixture/one/checkpoints/last.ckpt", weights_only=True)
    two = torch.load("runs/fixture/two/checkpoints/last.ckpt", weights_only=True)
    assert one["global_step"] == two["global_step"] == 16  # 2 epochs x 8 batches per process
    assert one["state_dict"].keys() == two["state_dict"].keys()
    for key, value in one["state_dict"].items():
        assert torch.equal(value, two["state_dict"][key]), key
    for key, value in one["optimizer_states"][0]["state"].items():
        assert torch.equal(value["exp_avg_sq"], two["optimizer_states"][0]["state"][key]["exp_avg_sq"]), key
