"""scripts/slurm.sbatch in a simulated one-task SLURM job: the requeue signal, then the requeued job resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from support import PACKAGE, ROOT, TEMPLATE

from runkit.testing.faults import fault
from runkit.testing.support import child_path

RUN = Path("runs/fixture/slurm-4242")  # the fixture's experiment, then the run the script names after the job
STEPS = 32  # fixture.yaml: 2 epochs x 16 batches
JOB = {  # what srun sets for the single task of job 4242
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "train",
    "SLURM_NNODES": "1",
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_NODELIST": "localhost",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}
FAKE_COMMANDS = {
    "srun": 'exec "$@"\n',  # one task: run it here
    "scontrol": 'echo "$@" >> "$SCONTROL_LOG"\nkill -TERM "$PPID"\n',  # log; then SIGTERM the job, as a requeue does
}


@pytest.fixture
def job_env(in_tmp: Path) -> dict[str, str]:
    """The environment of the job, with fake ``srun``/``scontrol``, in a folder that looks like the project root."""
    bin_dir = in_tmp / "bin"
    bin_dir.mkdir()
    for name, body in FAKE_COMMANDS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}")
        (bin_dir / name).chmod(0o755)
    (in_tmp / "src").symlink_to(ROOT / "src")  # the script finds the package under src/ of the submit folder
    return {
        **os.environ,
        **JOB,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": child_path(),  # the fixture task
        "PACKAGE": PACKAGE,  # what scripts/slurm.sbatch runs
        "PYTHONWARNINGS": "ignore",
        "SCONTROL_LOG": str(in_tmp / "scontrol.log"),
    }


def run(env: dict[str, str], command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_requeue_signal_checkpoints_requeues_and_the_requeued_job_resumes(job_env: dict[str, str]) -> None:
    sbatch = ["bash", str(TEMPLATE / "scripts" / "slurm.sbatch")]
    first = run(job_env, [*sbatch, fault("SignalAtStep", step=2, signum=int(signal.SIGUSR1))])  # SIGUSR1 after step 2
    assert first.returncode == 128 + signal.SIGUSR1, first.stdout[-2000:] + first.stderr[-3000:]
    assert Path("scontrol.log").read_text() == "requeue 4242\n"
    stopped = torch.load(RUN / "checkpoints/last.ckpt", weights_only=True)
    assert stopped["global_step"] == 2  # the step boundary where the signal came
    assert not list(RUN.glob("hpc_ckpt_*.ckpt"))  # one checkpoint at the stop: last.ckpt, which the requeue resumes

    requeued = run({**job_env, "SLURM_RESTART_COUNT": "1"}, sbatch)  # the same command, run again by SLURM
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    restored = f"Restored all states from the checkpoint at {RUN / 'checkpoints/last.ckpt'}"
    assert restored in requeued.stdout + requeued.stderr
    resumed = torch.load(RUN / "checkpoints/last.ckpt", weights_only=True)
    assert resumed["global_step"] == STEPS  # finished; the resume tests prove `--ckpt_path last` exact
    sessions = yaml.safe_load((RUN / "provenance.yaml").read_text())["sessions"]
    assert [session["status"] for session in sessions] == ["preempted", "finished"]
    assert sessions[0]["signal"] == "SIGUSR1"
