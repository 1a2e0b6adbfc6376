"""Checkpoints saved in the background (``--last_checkpoint.background``, on by default) keep every guarantee of a
save in the loop: the snapshot is the state of its step, a kill at any moment of the save leaves a ``last.ckpt``
that loads and resumes bit-exactly, a stop waits for the save in flight, a failed save stops the fit in one line.

The kills and stops come from inside the save's own thread, at the moment under test, while the loop trains on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
import yaml
from support import PACKAGE, submodule

from runkit.testing.support import assert_identical, child_path, last_checkpoint, run_dir_flags

checkpoint_io = submodule("safety.checkpoint_io")
digests = submodule("safety.digests")
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")
EVERY_5 = "--last_checkpoint.every_n_train_steps=5"  # saves at steps 5, 10, 15, 16 (epoch end), 20, ...
SAVE_THREAD = "runkit-checkpoint-save"


# --- faults at a moment of a background save, named on the command line of a fit -----------------------------------


class KillGroupWhileSaving(pl.Callback):
    """SIGKILLs this run's whole process group from the background save of global step ``step``, at ``moment``:

    ``writing`` (the temporary file half written), ``recorded`` (the file whole, its digest recorded as pending, not
    yet renamed) or ``renamed`` (in place as ``last.ckpt``, the record not yet told).
    """

    def __init__(self, moment: str, step: int = 10) -> None:
        self.moment, self.step = moment, step
        self._armed = False  # the save of `step` is being written

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Once every callback has set up: the run's record listens to the writer already.
        save, write = checkpoint_io.atomic_save, digests.HashingWriter.write

        def atomic_save(checkpoint: dict[str, Any], path: Path, before_replace: Any = None) -> None:
            self._armed = checkpoint.get("global_step") == self.step
            save(checkpoint, path, before_replace)

        def write_then_kill(hashing: Any, data: Any) -> int:
            written = write(hashing, data)
            if self.moment == "writing" and self._armed:
                _kill_group()
            return written

        checkpoint_io.atomic_save, digests.HashingWriter.write = atomic_save, write_then_kill  # this process dies
        writer = trainer.strategy.checkpoint_io
        writer.writing.append(self._recorded)  # after the record's listener
        writer.saved.insert(0, self._renamed)  # before it

    def _recorded(self, path: Path, written: object, checkpoint: dict[str, Any]) -> None:
        if self.moment == "recorded" and checkpoint["global_step"] == self.step:
            _kill_group()

    def _renamed(self, path: Path, checkpoint: dict[str, Any]) -> None:
        if self.moment == "renamed" and checkpoint["global_step"] == self.step:
            _kill_group()


def _kill_group() -> None:
    assert threading.current_thread().name == SAVE_THREAD, "the kill must come from a save in the background"
    os.killpg(os.getpgid(0), signal.SIGKILL)


class StopWhileSaving(pl.Callback):
    """From the background save of global step ``step``, once its file is written and before it is renamed:
    sends SIGTERM to this process and holds the save for ``hold_s`` seconds, while the loop trains on."""

    def __init__(self, step: int = 10, hold_s: float = 1.0) -> None:
        self.step, self.hold_s = step, hold_s

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        trainer.strategy.checkpoint_io.writing.append(self._writing)

    def _writing(self, path: Path, written: object, checkpoint: dict[str, Any]) -> None:
        if checkpoint["global_step"] == self.step and threading.current_thread().name == SAVE_THREAD:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(self.hold_s)


# --- helpers ---------------------------------------------------------------------------------------------------------


def start(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    """``python -m <package> fit *args`` in a session of its own (a process group to kill), output in ``out.log``."""
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore", "PYTHONFAULTHANDLER": "1"}
    with open(cwd / "out.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "fit", *args],
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
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"no end within {timeout} s:\n" + (cwd / "out.log").read_text()[-6000:]) from None


def record(run: Path) -> dict[str, Any]:
    return yaml.safe_load((run / "provenance.yaml").read_text())


@pytest.fixture(scope="module")
def straight(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The final checkpoint of a run that never stopped, saving in the loop (``background false``)."""
    with pytest.MonkeyPatch.context() as patch:  # module scope: the autouse fixture has not run yet
        patch.chdir(tmp_path_factory.mktemp("straight"))
        run = Path("runs/fixture/straight")
        cli.build_cli(["fit", *run_dir_flags(run), EVERY_5, "--last_checkpoint.background=false"])
        return last_checkpoint(run)


# --- the tests -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "saved_step"),
    [  # ~40 s each on 2 loaded cores (two fits): make test runs the first, make test-faults all three
        ("writing", 5),
        pytest.param("recorded", 5, marks=pytest.mark.faults),
        pytest.param("renamed", 10, marks=pytest.mark.faults),
    ],
)
def test_a_group_sigkill_while_a_background_save_is_in_flight_leaves_a_run_that_resumes_exactly(
    straight: dict[str, Any], in_tmp: Path, moment: str, saved_step: int
) -> None:
    run = in_tmp / "runs" / "fixture" / "killed"
    flags = [*run_dir_flags(run), EVERY_5]
    kill = ["--trainer.callbacks+=test_background_save.KillGroupWhileSaving", f"--trainer.callbacks.moment={moment}"]
    killed = start(in_tmp, *flags, *kill)
    assert finish(killed, in_tmp) == -signal.SIGKILL, (in_tmp / "out.log").read_text()[-4000:]
    # The previous last.ckpt or the new one, whole, and its digest one the record accepts (the resume checks it).
    assert last_checkpoint(run)["global_step"] == saved_step
    digests.verify(run / "checkpoints" / "last.ckpt")
    assert record(run)["progress"]["step"] in (5, saved_step)  # never ahead of the file
    resumed = start(in_tmp, *flags, "--ckpt_path=last")
    assert finish(resumed, in_tmp) == 0, (in_tmp / "out.log").read_text()[-4000:]
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]  # no leftovers
    final = last_checkpoint(run)
    for key in EXACT:
        assert_identical(final[key], straight[key], key)
    assert record(run)["checkpoints"]["checkpoints/last.ckpt"]["sha256"] == digests.file_sha256(
        run / "checkpoints" / "last.ckpt"
    )


@pytest.mark.faults  # ~40 s: two fits in processes of their own
def test_a_stop_waits_for_the_save_in_flight_then_saves_its_step_and_resumes_exactly(
    cli: ModuleType, straight: dict[str, Any], in_tmp: Path
) -> None:
    run = in_tmp / "runs" / "fixture" / "stopped"
    flags = [*run_dir_flags(run), EVERY_5]
    stopped = start(in_tmp, *flags, "--trainer.callbacks+=test_background_save.StopWhileSaving")
    log = in_tmp / "out.log"
    assert finish(stopped, in_tmp) == 143, log.read_text()[-4000:]
    saved = last_checkpoint(run)
    assert 10 < saved["global_step"] < 32  # the loop went on while step 10 was written, then stopped and saved
    assert f"Preemption: saved {run / 'checkpoints' / 'last.ckpt'}" in log.read_text()
    entry = record(run)["checkpoints"]["checkpoints/last.ckpt"]
    assert "pending" not in entry  # step 10's save committed first, then the final one
    assert (entry["step"], record(run)["progress"]["step"]) == (saved["global_step"], saved["global_step"])
    assert entry["sha256"] == digests.file_sha256(run / "checkpoints" / "last.ckpt")
    resumed = start(in_tmp, *flags, "--ckpt_path=last")
    assert finish(resumed, in_tmp) == 0, log.read_text()[-4000:]
    for key in EXACT:
        assert_identical(last_checkpoint(run)[key], straight[key], key)


def test_a_background_save_writes_the_state_of_its_step_whatever_the_loop_does_next(tmp_path: Path) -> None:
    weight = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    state = {"state_dict": {"weight": weight, "tied": weight.view(3, 2)}, "optimizer_states": [], "global_step": 3}
    writer = checkpoint_io.AtomicCheckpointIO()
    told: list[int] = []
    writer.saved.append(lambda path, checkpoint: told.append(checkpoint["global_step"]))
    with writer.in_background():
        writer.save_checkpoint(state, tmp_path / "last.ckpt")
    weight.add_(100)  # the loop's next optimizer step, while the save may be in flight
    state["global_step"] = 4
    writer.saves.wait()
    writer.saves.raise_failure()
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert (saved["global_step"], told) == (3, [3])
    assert torch.equal(saved["state_dict"]["weight"], torch.arange(6, dtype=torch.float32).reshape(2, 3))
    # Views of one tensor stay one tensor in the file: the snapshot keeps what shared its bytes.
    assert (
        saved["state_dict"]["tied"].untyped_storage().data_ptr()
        == saved["state_dict"]["weight"].untyped_storage().data_ptr()
    )


def test_a_background_save_of_non_finite_weights_is_refused_at_the_next_step_and_writes_nothing(tmp_path: Path) -> None:
    writer = checkpoint_io.AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    writer.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": 1}, path)
    with writer.in_background():
        writer.save_checkpoint({"state_dict": {"w": torch.tensor([1.0, float("nan"), 1.0])}, "global_step": 2}, path)
    writer.saves.wait()
    with pytest.raises(submodule("safety.nonfinite").NonFiniteCheckpointError, match="global step 2"):
        writer.saves.raise_failure()
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_one_save_is_in_flight_at_a_time(tmp_path: Path) -> None:
    """The next save waits for the one in flight before it takes its snapshot: host memory holds one at a time."""
    writer = checkpoint_io.AtomicCheckpointIO()
    release, entered = threading.Event(), threading.Event()

    def hold(path: Path, written: object, checkpoint: dict[str, Any]) -> None:
        if checkpoint["global_step"] == 1:
            entered.set()
            assert release.wait(60), "the test never released the first save"

    writer.writing.append(hold)
    with writer.in_background():
        writer.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "global_step": 1}, tmp_path / "last.ckpt")
    assert entered.wait(60), "the first save never reached its record"
    second = threading.Thread(
        target=lambda: writer.save_checkpoint(
            {"state_dict": {"w": torch.zeros(3)}, "global_step": 2}, tmp_path / "b.ckpt"
        )
    )
    with writer.in_background():
        second.start()
        second.join(0.5)
        assert second.is_alive()  # waiting for the first
        release.set()
        second.join(60)
    writer.saves.wait()
    assert torch.load(tmp_path / "b.ckpt", weights_only=True)["global_step"] == 2


@pytest.mark.gpu
def test_a_snapshot_of_cuda_tensors_lands_in_pinned_host_memory_reused_by_the_next(tmp_path: Path) -> None:
    snapshots = submodule("safety.background_save").Snapshots()
    weight = torch.arange(6, dtype=torch.float32, device="cuda")
    first = snapshots.take({"state_dict": {"weight": weight, "half": weight[:3]}})
    copied = first["state_dict"]["weight"]
    assert copied.device.type == "cpu"
    assert copied.is_pinned()
    assert torch.equal(copied, weight.cpu())
    assert first["state_dict"]["half"].untyped_storage().data_ptr() == copied.untyped_storage().data_ptr()
    weight.add_(1)
    second = snapshots.take({"state_dict": {"weight": weight, "half": weight[:3]}})
    assert second["state_dict"]["weight"].untyped_storage().data_ptr() == copied.untyped_storage().data_ptr()
    assert torch.equal(second["state_dict"]["weight"], weight.cpu())
