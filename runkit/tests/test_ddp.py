"""DDP with 2 CPU processes (gloo) and 2 loader workers each, launched like a user would: one command, checked from
its outputs.

One run of the fixture task serves every check: its checkpoint, weights equal to a 1-process run with the
same global batch, each process's shard per epoch, metrics synchronised across processes, the logged LR, and how
the workers started.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import fixture_task
import pytest
import torch
import yaml
from support import PACKAGE, submodule

from runkit.testing import probes
from runkit.testing.support import launch

pytestmark = pytest.mark.slow  # two processes
STEPS = 16  # 2 epochs x 8 batches per process (256 sequences / 2 processes / 16 per batch)
LR = 0.1
COMMON = [
    # SGD, not Adam: Adam would hide summed instead of averaged gradients. No dropout and no augmentation:
    # their random draws differ between one process and two.
    "--model.init_args.optimizer=sgd",
    f"--model.init_args.lr={LR}",
    "--model.init_args.dropout=0.0",
    "--data.init_args.augment=false",
]
WORKERS = "--data.init_args.num_workers=2"  # they change no number: the kit seeds the data per batch


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The working directory of a 2-process fit of the fixture task, in a new (unnamed) run."""
    cwd = tmp_path_factory.mktemp("ddp")
    flags = ["--trainer.devices=2", "--trainer.accelerator=cpu", "--trainer.strategy=ddp"]
    recorder = ["--trainer.callbacks+=runkit.testing.probes.RankRecorder", "--trainer.callbacks.directory=ranks"]
    result = launch(PACKAGE, "fit", *flags, *COMMON, WORKERS, *recorder, cwd=cwd)
    assert result.returncode == 0, result.stdout[-5000:]
    return cwd


def run_of(cwd: Path) -> Path:
    """The one run directory: rank 0 created it, the other process wrote into the same one."""
    (run,) = (cwd / "runs" / "fixture").iterdir()
    return run


def ranks(cwd: Path) -> list[dict]:
    return [json.loads((cwd / "ranks" / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_processes_write_one_checkpoint_and_one_log(ddp_run: Path) -> None:
    run = run_of(ddp_run)
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    assert torch.load(run / "checkpoints/last.ckpt", weights_only=True)["global_step"] == STEPS
    assert [record["world_size"] for record in ranks(ddp_run)] == [2, 2]
    (session,) = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
    assert (session["status"], session["devices"]["world_size"]) == ("finished", 2)


def test_weights_match_one_process_with_the_same_global_batch(ddp_run: Path, run_cli: Callable[..., object]) -> None:
    single = run_cli(
        "fit", *COMMON, "--data.init_args.batch_size=32", "--trainer.callbacks+=runkit.testing.probes.InitialWeights"
    )
    assert single.trainer.global_step == STEPS
    distributed = torch.load(run_of(ddp_run) / "checkpoints/last.ckpt", weights_only=True)["state_dict"]
    initial = probes.find(single.trainer, probes.InitialWeights).parameters
    moved = max(float((value - initial[name]).abs().max()) for name, value in single.model.named_parameters())
    assert moved > 1e-2
    for name, value in single.model.state_dict().items():
        torch.testing.assert_close(distributed[name], value, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_each_process_reads_its_own_shard_which_changes_every_epoch(ddp_run: Path) -> None:
    datamodule = fixture_task.SequenceData()
    datamodule.setup("fit")
    sample = {value: index for index, value in enumerate(datamodule.datasets["train"].targets.flatten().tolist())}
    assert len(sample) == 256  # every target names one sample
    records = ranks(ddp_run)
    shards = [[[sample[value] for value in epoch["targets"]] for epoch in record["epochs"]] for record in records]
    for epoch in (0, 1):
        first, second = shards[0][epoch], shards[1][epoch]
        assert not set(first) & set(second)  # disjoint shards ...
        assert sorted(first + second) == list(range(256))  # ... that cover the training set
    for shard in shards:
        assert shard[0] != shard[1]  # set_epoch was called: a new order every epoch ...
        assert set(shard[0]) != set(shard[1])  # ... and a new shard


def test_workers_start_from_a_fork_server_where_a_fork_can_hang(ddp_run: Path) -> None:
    # CPython gh-112275 (before 3.10.15 and 3.11.10): see kit/safety/worker_start.py.
    expected = "forkserver" if submodule("safety.worker_start").fork_can_hang() else "fork"
    for record in ranks(ddp_run):
        assert record["start_methods"] == {"train": expected, "val": expected}


def test_metrics_logged_with_sync_dist_agree_across_processes(ddp_run: Path) -> None:
    records = ranks(ddp_run)
    assert records[0]["metrics"]["val/loss"] == records[1]["metrics"]["val/loss"]
    assert records[0]["step_losses"] != records[1]["step_losses"]  # each process trains on its own batches


def test_logged_lr_follows_the_schedule_sized_from_one_shard(ddp_run: Path) -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=STEPS)
    expected = []
    for _ in range(STEPS):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    logged = probes.read_scalars(run_of(ddp_run))["lr-SGD"]
    assert [step for step, _ in logged] == list(range(STEPS))
    assert [value for _, value in logged] == pytest.approx(expected, rel=1e-6)
