"""A module whose optimizer steps where Lightning does not count it (SAM's ``base_optimizer.step()`` with manual
optimization: issue 33, item 5) is found in its first batches and said in one line, and stops at a batch boundary on
a signal sent to its process group (it waited for the epoch's end), then resumes exactly."""

from __future__ import annotations

import signal
from pathlib import Path
from types import ModuleType

import lightning.pytorch as pl
import pytest
import yaml
from lightning.pytorch.demos import BoringModel
from support import PACKAGE, TESTS, submodule

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, fit_exit_code, last_checkpoint, launch, run_dir_flags

SAM = ["--model=foreign.SAMModule", "--data=foreign.HydraStyleData", "--data.num_workers=2", "--trainer.max_epochs=2"]
SAID = "changed its weights in a batch without a step Lightning counts"
EXACT = ("state_dict", "optimizer_states", "epoch")


@pytest.fixture(autouse=True)
def _foreign_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "foreign.yaml"))


def batches_done(run: Path) -> int:
    loops = last_checkpoint(run)["loops"]["fit_loop"]
    return int(loops["epoch_loop.batch_progress"]["total"]["completed"])


def test_sam_is_said_stops_at_a_batch_boundary_on_a_group_sigterm_and_resumes_exactly(
    cli: ModuleType, in_tmp: Path
) -> None:
    straight, stopped = in_tmp / "runs/foreign/straight", in_tmp / "runs/foreign/stopped"
    assert fit_exit_code(cli, straight, *SAM) == 0
    assert last_checkpoint(straight)["global_step"] == 0  # the module's steps are its own: Lightning counts none
    # Its own session and process group (setsid), signalled from outside it as a scheduler does, in batch 1 of 8.
    signal_group = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=0)
    done = launch(PACKAGE, "fit", *run_dir_flags(stopped), *SAM, signal_group, cwd=in_tmp, wrapper=("setsid",))
    assert done.returncode == 143, done.stdout[-3000:]
    assert done.stdout.count(SAID) == 1, done.stdout[-3000:]
    assert batches_done(stopped) == 1  # after the batch the signal came in, not at the epoch's end (8)
    resume = ["--config", str(stopped / "config.yaml"), "--ckpt_path=last", "--trainer.callbacks=[]"]  # no signal
    assert fit_exit_code(cli, stopped, *resume) == 0
    expected, resumed = last_checkpoint(straight), last_checkpoint(stopped)
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)
    statuses = [s["status"] for s in yaml.safe_load((stopped / "provenance.yaml").read_text())["sessions"]]
    assert statuses == ["preempted", "finished"]


class CountedManualSteps(BoringModel):
    """Manual optimization through ``self.optimizers()``: Lightning counts each step."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: object, batch_idx: int) -> None:
        optimizer = self.optimizers()
        self.manual_backward(self.step(batch))  # type: ignore[arg-type]
        optimizer.step()
        optimizer.zero_grad()


def test_a_module_whose_manual_steps_lightning_counts_is_not_said(caplog: pytest.LogCaptureFixture) -> None:
    watch = submodule("safety.outside_steps").OutsideSteps()
    trainer = pl.Trainer(
        max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[watch]
    )
    trainer.fit(CountedManualSteps())
    assert trainer.global_step == 4
    assert watch.found is False
    assert SAID not in caplog.text


@pytest.mark.faults  # 2 DDP processes, three runs: minutes on this machine
def test_sam_under_two_ddp_processes_stops_at_a_batch_boundary_and_resumes_exactly(in_tmp: Path) -> None:
    ddp = [*SAM, "--trainer.devices=2", "--trainer.strategy=ddp"]
    straight, stopped = in_tmp / "runs/foreign/straight", in_tmp / "runs/foreign/stopped"
    done = launch(PACKAGE, "fit", *run_dir_flags(straight), *ddp, cwd=in_tmp)
    assert done.returncode == 0, done.stdout[-3000:]
    signal_group = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=0)
    done = launch(PACKAGE, "fit", *run_dir_flags(stopped), *ddp, signal_group, cwd=in_tmp, wrapper=("setsid",))
    assert done.returncode == 143, done.stdout[-3000:]
    assert done.stdout.count(SAID) == 1, done.stdout[-3000:]  # rank 0 says it
    assert batches_done(stopped) == 1  # every rank stopped after the same batch, not at the epoch's end (4)
    resume = ["-c", str(stopped / "config.yaml"), "--ckpt_path=last", "--trainer.callbacks=[]"]
    done = launch(PACKAGE, "fit", *resume, cwd=in_tmp)
    assert done.returncode == 0, done.stdout[-3000:]
    expected, resumed = last_checkpoint(straight), last_checkpoint(stopped)
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)
