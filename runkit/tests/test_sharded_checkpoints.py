"""Sharded checkpoints through the kit (``safety/sharded_checkpoints.py``): FSDP2 under ``ModelParallelStrategy`` on
2 CPU processes stops on SIGTERM, resumes from ``--ckpt_path last`` bit-identical to a run that never stopped, and
its folders' digests are recorded; a save killed between the shards and the commit leaves the previous checkpoint
under the name, and the next save removes what it left; a changed byte, a NaN, a store are refused. FSDP1's
``state_dict_type: sharded`` needs a GPU (``gpu``)."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch.strategies import ModelParallelStrategy
from support import PACKAGE, submodule
from test_fault_matrix import finish, start
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, launch, run_dir_flags

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP in one process, no group
sharded, reads = submodule("safety.sharded_checkpoints"), submodule("safety.sharded_reads")
STEPS = 16  # fixture.yaml on 2 processes: 2 epochs of 8 batches
MODEL_PARALLEL = [
    "--trainer.devices=2",
    "--trainer.strategy=lightning.pytorch.strategies.ModelParallelStrategy",
    "--trainer.strategy.data_parallel_size=2",
    "--trainer.strategy.tensor_parallel_size=1",
    "--model=fixture_task.ShardedRegressor",  # fully_shard over the data-parallel mesh
    "--data.init_args.num_workers=2",  # loader workers per process, as the field runs
]


def read(folder: Path, tmp_path: Path) -> dict[str, Any]:
    """A sharded checkpoint as one dict: its shards gathered (DCP's own converter) and its ``meta.pt``."""
    whole = tmp_path / f"{folder.parent.parent.name}-{folder.name}.pt"
    dcp_to_torch_save(folder, whole)
    return {**torch.load(whole, weights_only=True), **torch.load(folder / "meta.pt", weights_only=True)}


def assert_recorded(run: Path, name: str) -> None:
    """``checkpoints/<name>`` names a committed version whose manifest the run recorded, each file as listed."""
    folder = run / "checkpoints" / name
    assert folder.is_symlink()
    assert folder.resolve().parent == folder.parent  # a link to a version beside it
    manifest = (folder / "manifest.sha256").read_bytes()
    entry = yaml.safe_load((run / "provenance.yaml").read_text())["checkpoints"][f"checkpoints/{name}"]
    assert entry["sha256"] == hashlib.sha256(manifest).hexdigest()
    assert "pending" not in entry
    lines = [line.split("  ") for line in manifest.decode().splitlines()]
    assert sorted(file for _, file in lines) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    for sha, file in lines:  # what `sha256sum -c manifest.sha256` checks
        assert hashlib.sha256((folder / file).read_bytes()).hexdigest() == sha, file
    assert entry["size"] == sum((folder / file).stat().st_size for _, file in lines) + len(manifest)
    versions = sorted(path.name for path in folder.parent.glob(f".{name}.*"))
    assert versions == [folder.resolve().name]  # no temporary folder, no version left behind


@pytest.mark.slow  # three 2-process fits
def test_fsdp2_stopped_by_sigterm_resumes_from_last_bit_identical(tmp_path: Path) -> None:
    straight, cut = tmp_path / "runs" / "fixture" / "straight", tmp_path / "runs" / "fixture" / "cut"
    assert finish(start(tmp_path, *run_dir_flags(straight), *MODEL_PARALLEL), tmp_path) == 0, (
        tmp_path / "out.log"
    ).read_text()[-4000:]
    term = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group")
    assert finish(start(tmp_path, *run_dir_flags(cut), *MODEL_PARALLEL, term), tmp_path) == 143
    assert read(cut / "checkpoints" / "last.ckpt", tmp_path)["global_step"] == 6  # the step the signal stopped
    assert_recorded(cut, "last.ckpt")

    resumed = start(tmp_path, *run_dir_flags(cut), *MODEL_PARALLEL, "--ckpt_path=last")
    assert finish(resumed, tmp_path) == 0, (tmp_path / "out.log").read_text()[-4000:]
    expected, actual = read(straight / "checkpoints/last.ckpt", tmp_path), read(cut / "checkpoints/last.ckpt", tmp_path)
    assert expected["global_step"] == STEPS
    for key in ("state_dict", "optimizer_0", "lr_schedulers", "global_step", "epoch"):
        assert_identical(actual[key], expected[key], key)
    for name in ("last.ckpt", "best.ckpt"):
        assert_recorded(cut, name)
    sessions = yaml.safe_load((cut / "provenance.yaml").read_text())["sessions"]
    assert [session["status"] for session in sessions] == ["preempted", "finished"]


def state(value: float) -> dict[str, Any]:
    return {"state_dict": {"w": torch.full((4, 3), value)}, "optimizer_0": {"state": {"w": torch.full((4,), value)}}}


def save(folder: Path, step: int, writer: Any = None) -> None:
    checkpoint = {"global_step": step, "epoch": 0}
    sharded.save_sharded(state(float(step)), checkpoint, folder / "last.ckpt", writer)


def weights(path: Path, tmp_path: Path) -> float:
    dcp_to_torch_save(path, tmp_path / "whole.pt")
    return float(torch.load(tmp_path / "whole.pt", weights_only=True)["state_dict"]["w"][0, 0])


def die(*args: object, **kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def killed(monkeypatch: pytest.MonkeyPatch, where: str, folder: Path, step: int) -> None:
    """Saves ``step`` in a forked process that SIGKILLs itself as it reaches ``where``: nothing after it runs."""
    pid = os.fork()
    if pid == 0:
        try:
            writer = submodule("safety.checkpoint_io").AtomicCheckpointIO()
            if where == "writing":
                writer.writing.append(die)
            else:
                monkeypatch.setattr(where, die)
            save(folder, step, writer)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize(
    "where",
    [
        "runkit.safety.sharded_checkpoints.commit",  # the shards written and hashed: nothing of the commit yet
        "writing",  # meta.pt and the manifest fsynced, as the run's record takes the pending digest
        "os.symlink",  # the folder renamed to its version, before the link to it is made
        "os.replace",  # the new link made, before it replaces the name
    ],
)
def test_a_save_killed_before_its_commit_leaves_the_previous_checkpoint_and_the_next_save_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    save(tmp_path, 1)
    killed(monkeypatch, where, tmp_path, 2)
    reads.verify_sharded(tmp_path / "last.ckpt")  # the manifest and every file still agree
    assert weights(tmp_path / "last.ckpt", tmp_path) == 1.0
    assert len(list(tmp_path.glob(".last.ckpt.*"))) >= 2  # the version named, and what the killed save left
    save(tmp_path, 3)
    assert weights(tmp_path / "last.ckpt", tmp_path) == 3.0
    assert [path.name for path in tmp_path.glob(".last.ckpt.*")] == [(tmp_path / "last.ckpt").resolve().name]


def test_a_commit_that_fails_raises_one_line_keeps_the_name_and_removes_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save(tmp_path, 1)

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.symlink", full)
    with pytest.raises(submodule("safety.checkpoint_io").CheckpointWriteError, match="No space left on device"):
        save(tmp_path, 2)
    monkeypatch.undo()
    assert weights(tmp_path / "last.ckpt", tmp_path) == 1.0
    assert not list(tmp_path.glob(".last.ckpt.*.tmp"))


def test_nan_in_a_shard_is_never_saved(tmp_path: Path) -> None:
    save(tmp_path, 1)
    broken = state(2.0)
    broken["optimizer_0"]["state"]["w"][1] = float("nan")
    with pytest.raises(submodule("safety.nonfinite").NonFiniteCheckpointError, match=r"optimizer_0\.state\.w"):
        sharded.save_sharded(broken, {"global_step": 2}, tmp_path / "last.ckpt", None)
    assert weights(tmp_path / "last.ckpt", tmp_path) == 1.0
    assert len(list(tmp_path.glob(".last.ckpt.*"))) == 1


def test_a_changed_byte_in_a_shard_is_refused_on_read(tmp_path: Path) -> None:
    save(tmp_path, 1)
    shard = next((tmp_path / "last.ckpt").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{shard.name}'s SHA-256 is .* its manifest.sha256 says"):
        reads.verify_sharded(tmp_path / "last.ckpt")


def test_the_name_is_a_checkpoint_for_ckpt_path_runs_and_the_commands_checks(tmp_path: Path) -> None:
    checkpoints = tmp_path / "run" / "checkpoints"
    save(checkpoints, 4)
    resolved = submodule("safety.checkpoints").resolve_ckpt_path("last", tmp_path / "run")
    assert resolved == str(checkpoints / "last.ckpt")
    assert submodule("run.folders").is_checkpoint(checkpoints / "last.ckpt")
    read = submodule("safety.checkpoint_checks").read_checkpoint(resolved)
    assert read["global_step"] == 4
    assert {key: tuple(value.shape) for key, value in read["state_dict"].items()} == {"w": (4, 3)}  # from the index


def test_the_strategy_checks_a_folder_before_loading_it_and_removes_a_version_with_its_link(tmp_path: Path) -> None:
    save(tmp_path, 1)
    strategy = ModelParallelStrategy()
    sharded.take_over(type("Trainer", (), {"strategy": strategy})())
    (tmp_path / "last.ckpt" / "meta.pt").write_bytes(b"changed")
    with pytest.raises(ValueError, match=r"meta\.pt's SHA-256 is"):
        strategy.load_checkpoint(tmp_path / "last.ckpt")
    strategy.remove_checkpoint(tmp_path / "last.ckpt")  # a top-k checkpoint that dropped out
    assert list(tmp_path.iterdir()) == []


def test_a_run_in_a_store_is_refused_with_sharded_checkpoints() -> None:
    trainer = type("Trainer", (), {"strategy": ModelParallelStrategy()})()
    store = submodule("store").location("s3://bucket/runs/fixture/x")
    with pytest.raises(ValueError, match=r"^trainer\.strategy: .* sharded checkpoints, which need a local or shared"):
        submodule("command.always_on").with_sharded_checkpoints(trainer, store)


@pytest.mark.gpu
def test_fsdp_sharded_state_dict_checkpoints_go_through_the_kit_and_resume(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fixture" / "fsdp"
    fsdp = [
        "--trainer.accelerator=gpu",
        "--trainer.devices=1",
        "--trainer.strategy=lightning.pytorch.strategies.FSDPStrategy",
        "--trainer.strategy.state_dict_type=sharded",
        *run_dir_flags(run),
    ]
    first = launch(PACKAGE, "fit", *fsdp, "--trainer.max_epochs=1", cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-4000:]
    assert (run / "checkpoints/last.ckpt/manifest.sha256").is_file()
    resumed = launch(PACKAGE, "fit", *fsdp, "--trainer.max_epochs=2", "--ckpt_path=last", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    meta = torch.load(run / "checkpoints/last.ckpt/meta.pt", weights_only=True)
    assert meta["global_step"] == 32  # 2 epochs of 16 batches on one process
    entry = yaml.safe_load((run / "provenance.yaml").read_text())["checkpoints"]["checkpoints/last.ckpt"]
    assert entry["sha256"] == hashlib.sha256((run / "checkpoints/last.ckpt/manifest.sha256").read_bytes()).hexdigest()
