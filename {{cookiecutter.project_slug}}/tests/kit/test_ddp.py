"""DDP with 2 CPU processes (gloo), launched like a user would: one command, checked from its outputs.

One run serves every check: its checkpoint, weights equal to a 1-process run with the same global
batch, each process's shard per epoch, metrics synchronised across processes, the logged LR.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import probes
import pytest
import torch
from support import CONFIGS, PACKAGE, launch, run_dir_flags
from test_schedule_logged import WARMUP, check_schedule, logged_lr

pytestmark = pytest.mark.slow  # two processes
NETWORK = ["--model.network.init_args.depth=1", "--model.network.init_args.dim=32"]
STEPS = 8  # debug.yaml: 2 epochs x 4 batches per process (256 samples / 2 processes / 32 per batch)
LR = 0.1
COMMON = [
    *NETWORK,
    # SGD, not Adam: Adam would hide summed instead of averaged gradients, and it turns the rounding noise
    # of gradients that are zero in exact arithmetic (attention's key bias) into full-size steps.
    "--model.optimizer=torch.optim.SGD",
    f"--model.optimizer.init_args.lr={LR}",
    f"--model.scheduler.init_args.warmup_steps={WARMUP}",
    "--trainer.enable_progress_bar=false",
]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a 2-process fit of the transformer (LayerNorm: no batch statistics)."""
    cwd = tmp_path_factory.mktemp("ddp")
    presets = [f"--config={CONFIGS / name}.yaml" for name in ("default", "debug/tiny", "model/transformer", "distributed/ddp")]
    flags = ["--trainer.devices=2", "--trainer.accelerator=cpu", *run_dir_flags("runs/ddp")]
    recorder = ["--trainer.callbacks+=probes.RankRecorder", "--trainer.callbacks.directory=ranks"]
    result = launch(PACKAGE, "fit", *presets, *flags, *COMMON, *recorder, cwd=cwd)
    assert result.returncode == 0, result.stdout[-5000:]
    return cwd


def ranks(cwd: Path) -> list[dict]:
    return [json.loads((cwd / "ranks" / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_processes_write_one_checkpoint_and_one_log(ddp_run: Path) -> None:
    run = ddp_run / "runs/ddp"
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert len(list(run.glob("events.out.tfevents.*"))) == 1
    assert torch.load(run / "checkpoints/last.ckpt", weights_only=True)["global_step"] == STEPS
    assert [record["world_size"] for record in ranks(ddp_run)] == [2, 2]


def test_weights_match_one_process_with_the_same_global_batch(ddp_run: Path, run_cli: Callable[..., object]) -> None:
    single = run_cli(
        "fit",
        *COMMON,
        "--data.init_args.batch_size=64",
        "--trainer.callbacks+=probes.InitialWeights",
        presets=("debug/tiny", "model/transformer"),
    )
    assert single.trainer.global_step == STEPS
    distributed = torch.load(ddp_run / "runs/ddp/checkpoints/last.ckpt", weights_only=True)["state_dict"]
    initial = probes.find(single.trainer, probes.InitialWeights).parameters
    moved = max(float((value - initial[name]).abs().max()) for name, value in single.model.named_parameters())
    assert moved > 1e-2
    for name, value in single.model.state_dict().items():
        torch.testing.assert_close(distributed[name], value, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_each_process_reads_its_own_shard_which_changes_every_epoch(ddp_run: Path, data: ModuleType) -> None:
    datamodule = gratings.GratingsDataModule(train_size=256, val_size=64, test_size=64, batch_size=32, num_workers=0)
    datamodule.setup("fit")
    labels = datamodule.datasets["train"].labels
    records = ranks(ddp_run)
    for epoch in (0, 1):
        shards = [[tuple(key) for key in record["epochs"][epoch]["keys"]] for record in records]
        assert all(key_epoch == epoch for shard in shards for key_epoch, _ in shard)  # set_epoch was called
        indices = [[index for _, index in shard] for shard in shards]
        assert not set(indices[0]) & set(indices[1])  # disjoint shards ...
        assert sorted(indices[0] + indices[1]) == list(range(256))  # ... that cover the training set
        for record, shard in zip(records, indices, strict=True):  # and each process trained on its own
            assert record["epochs"][epoch]["labels"] == labels[shard].tolist()
    for record in records:
        assert record["epochs"][0]["keys"] != record["epochs"][1]["keys"]  # a new shard every epoch
        first, second = ({index for _, index in e["keys"]} for e in record["epochs"])
        assert first != second


def test_epoch_metrics_are_synchronised_across_processes(ddp_run: Path) -> None:
    records = ranks(ddp_run)
    for key in ("train/loss_epoch", "train/acc_epoch", "val/loss", "val/acc"):
        assert records[0]["metrics"][key] == records[1]["metrics"][key], key
    assert records[0]["step_losses"] != records[1]["step_losses"]  # each process's own batches differ ...
    last_epoch = [loss for record in records for loss in record["step_losses"][-4:]]
    # ... and the epoch loss is the mean over both processes' batches, not one process's
    assert records[0]["metrics"]["train/loss_epoch"] == pytest.approx(sum(last_epoch) / len(last_epoch), rel=1e-5)


def test_logged_lr_follows_the_schedule(ddp_run: Path) -> None:
    check_schedule(logged_lr(ddp_run / "runs/ddp", "SGD"), total=STEPS, peak=LR)  # sized from one process's shard


def test_workers_per_process_shrink_with_processes_per_node(
    ddp_run: Path, data: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert [record["num_workers"] for record in ranks(ddp_run)] == [max(0, min(4, cpus // 2 - 1))] * 2
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(16)), raising=False)
    datamodule = gratings.GratingsDataModule()
    workers = {}
    for devices in (1, 2, 4, 8, 16):
        datamodule.trainer = SimpleNamespace(num_devices=devices)
        workers[devices] = datamodule.resolved_num_workers()
    assert workers == {1: 4, 2: 4, 4: 3, 8: 1, 16: 0}
