"""Checkpoints: last.ckpt is always the newest state, writes survive kill -9, bad checkpoints are refused.

Every refusal exits 2 with a message naming the file and the problem, before anything is written.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from support import submodule

from runkit.testing.faults import fault
from runkit.testing.support import run_dir_flags

checkpoint_io = submodule("safety.checkpoint_io")
checkpoints = submodule("safety.checkpoints")
monitor_mode = submodule("safety.monitor_mode")
STEPS_PER_EPOCH = 16  # fixture.yaml: 256 training sequences in batches of 16


def run(cli: ModuleType, subcommand: str, run_dir: Path, *args: str) -> Any:
    return cli.build_cli([subcommand, *run_dir_flags(run_dir), *args])


def digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


@pytest.fixture(autouse=True)
def _in_tmp(in_tmp: Path) -> None:
    """Every test runs in an empty folder: nothing lands in the project."""


@pytest.fixture(scope="module")
def trained(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the fixture task (2 epochs x 16 steps); tests work on copies of it."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    run(cli, "fit", run_dir)
    return run_dir


@pytest.fixture
def run_dir(trained: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


@pytest.mark.parametrize(
    ("names", "mode"),
    [
        (["val/loss", "val_loss", "train/loss_epoch", "val/error_rate", "val/mse", "val/nll", "val/perplexity"], "min"),
        (["val/loss/dataloader_idx_1", "val/heatmap_loss"], "min"),  # Lightning's loader suffix; `map` in a word
        (["val/acc", "val_accuracy", "val/acc_best", "val/top1_acc", "val/f1_macro", "val/auroc", "val/mAP50"], "max"),
        (["val/miou", "val/dice", "val/precision", "val/recall", "val/score", "val/r2"], "max"),
        (["val/kappa", "val/cross_entropy_ratio", "val/acc_loss", "val/dataloader_idx_0"], None),  # neither, or both
    ],
)
def test_the_mode_is_read_from_the_metric_s_name(names: list[str], mode: str | None) -> None:
    assert {name: monitor_mode.metric_mode(name) for name in names} == dict.fromkeys(names, mode)


def test_the_mode_follows_the_monitor_and_a_contradicting_one_is_refused() -> None:
    assert checkpoints.BestCheckpoint("val/loss").mode == "min"
    assert checkpoints.BestCheckpoint("val/acc").mode == "max"
    assert checkpoints.BestCheckpoint("val/kappa", "max").mode == "max"  # a name that says neither: the mode given
    assert checkpoints.BestCheckpoint(None).mode == checkpoints.BestCheckpoint(None, "min").mode == "min"
    with pytest.raises(ValueError, match=r"mode max contradicts monitor 'val/loss', whose name says lower \(a loss"):
        checkpoints.BestCheckpoint("val/loss", "max")
    with pytest.raises(ValueError, match=r"mode min contradicts monitor 'val/acc', whose name says higher"):
        checkpoints.BestCheckpoint("val/acc", "min")
    with pytest.raises(ValueError, match="'val/kappa': its name does not say whether lower or higher is better"):
        checkpoints.BestCheckpoint("val/kappa")
    with pytest.raises(ValueError, match="mode max with monitor null"):
        checkpoints.BestCheckpoint(None, "max")


def test_a_resume_that_ranks_by_another_metric_starts_the_ranking_over(lightning_log: list[str]) -> None:
    # The loss's best (0.1) would stay unbeaten by any accuracy below it: best.ckpt never written again.
    saved = checkpoints.BestCheckpoint("val/loss", None)
    saved.best_model_score, saved.best_model_path = torch.tensor(0.1), "run/checkpoints/best.ckpt"
    resumed = checkpoints.BestCheckpoint("val/acc")
    resumed.load_state_dict(saved.state_dict())
    assert resumed.best_model_score is None
    assert float(resumed.kth_value) == -float("inf")  # the next validation's accuracy is the best so far
    assert resumed.best_model_path == "run/checkpoints/best.ckpt"
    assert any("ranked by val/loss, this run by val/acc: the ranking starts over" in line for line in lightning_log)
    same = checkpoints.BestCheckpoint("val/loss")
    same.load_state_dict(saved.state_dict())
    assert float(same.best_model_score) == pytest.approx(0.1)  # the same metric: its ranking continues


def test_after_a_resume_the_best_checkpoint_s_state_is_an_uninterrupted_run_s(cli: ModuleType, tmp_path: Path) -> None:
    """Lightning restores no ``current_score``: a resumed run held ``None`` until the next improvement, an
    uninterrupted one the score of the last. With a learning rate of 0 the validation loss never improves again."""
    flags = ["--model.init_args.lr=0", "--model.init_args.optimizer=sgd", "--trainer.max_epochs=3"]
    run(cli, "fit", tmp_path / "straight", *flags)
    with pytest.raises(SystemExit):
        run(cli, "fit", tmp_path / "stopped", *flags, fault("SignalAtStep", step=20, signum=int(signal.SIGTERM)))
    run(cli, "fit", tmp_path / "stopped", *flags, "--ckpt_path=last")

    def best_state(name: str) -> dict[str, Any]:
        return torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"][
            "BestCheckpoint"
        ]

    straight, resumed = best_state("straight"), best_state("stopped")
    assert straight["current_score"] is not None
    for key in ("current_score", "best_model_score", "kth_value"):
        assert torch.equal(resumed[key], straight[key]), key


def test_validation_switched_off_is_the_reason_given_for_no_best(
    cli: ModuleType, tmp_path: Path, lightning_log: list[str]
) -> None:
    # The line said the model "logs no validation loss": it logs one whenever it validates.
    run_dir = tmp_path / "runs" / "fixture" / "unvalidated"
    short = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=0"]
    run(cli, "fit", run_dir, *short, "--best_checkpoint.monitor=null")
    assert [line for line in lightning_log if line.startswith("best_checkpoint:")] == [
        "best_checkpoint: validation is off (trainer.limit_val_batches: 0), so there is no validation loss to follow:"
        " no best.ckpt; name a training metric with --best_checkpoint.monitor, or switch it off with"
        " --best_checkpoint null"
    ]
    assert sorted(path.name for path in (run_dir / "checkpoints").iterdir()) == ["last.ckpt"]


def test_last_is_rewritten_every_n_steps_mid_epoch(cli: ModuleType, tmp_path: Path) -> None:
    # Every 3 steps; the run crashes after step 20 (epoch 1 holds steps 17-32).
    with pytest.raises(RuntimeError, match="injected crash"):
        run(cli, "fit", tmp_path / "run", "--last_checkpoint.every_n_train_steps=3", fault("RaiseAtStep", step=20))
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 18  # newer than the end of epoch 0 (step 16) and than best.ckpt
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["global_step"] == STEPS_PER_EPOCH


def test_best_and_last_resolve_to_files_without_warnings(cli: ModuleType, run_dir: Path) -> None:
    for alias in ("best", "last"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            validated = run(cli, "validate", run_dir, f"--ckpt_path={alias}")
        assert validated.trainer.ckpt_path == str(run_dir / "checkpoints" / f"{alias}.ckpt")
        assert not [w for w in caught if "ModelCheckpoint" in str(w.message)]  # "multiple ... callbacks"


def _corrupt(path: Path) -> None:
    path.write_bytes(b"this is not a checkpoint")


def _truncated(path: Path) -> None:
    data = (path.parent / "last.ckpt").read_bytes()
    path.write_bytes(data[: len(data) // 2])  # what a non-atomic write leaves when it is killed


class _Payload:
    """Unpickling this runs ``os.mkdir(marker)``: what a malicious checkpoint would do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def _pickled(path: Path) -> None:
    checkpoint = torch.load(path.parent / "last.ckpt", weights_only=True)
    torch.save({**checkpoint, "extra": _Payload(path.parent.parent / "pwned")}, path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_corrupt, "is not readable (truncated or corrupt?)"),
        (_truncated, "is not readable (truncated or corrupt?)"),
        (_pickled, "holds pickled Python objects and is refused"),
    ],
    ids=["garbage", "truncated", "pickled-object"],
)
def test_unreadable_or_unsafe_checkpoint_exits_2_and_changes_nothing(
    cli: ModuleType, run_dir: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    bad = run_dir / "checkpoints" / "bad.ckpt"
    make(bad)
    before = digests(run_dir / "checkpoints")
    for subcommand in ("fit", "validate"):
        with pytest.raises(SystemExit) as exit_info:
            run(cli, subcommand, run_dir, f"--ckpt_path={bad}")
        assert exit_info.value.code == 2
        assert f"checkpoint {bad} {message}" in capsys.readouterr().err
    assert digests(run_dir / "checkpoints") == before
    assert not (run_dir.parent / "pwned").exists()  # the payload never ran


def test_checkpoint_io_reads_with_weights_only(run_dir: Path) -> None:
    _pickled(run_dir / "checkpoints" / "bad.ckpt")
    with pytest.raises(Exception, match="Weights only load failed"):
        checkpoint_io.AtomicCheckpointIO().load_checkpoint(run_dir / "checkpoints" / "bad.ckpt")
    assert not (run_dir.parent / "pwned").exists()


@pytest.mark.parametrize(
    ("args", "detail"),
    [
        (["--model=fixture_task.LinearRegressor"], "missing ("),  # another model altogether
        (["--model.init_args.hidden=8"], "other shape ("),  # the same model, resized
    ],
    ids=["other-model", "other-width"],
)
def test_checkpoint_of_another_model_exits_2_and_changes_nothing(
    cli: ModuleType, run_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], detail: str
) -> None:
    before = digests(run_dir / "checkpoints")
    # `fit` would name the keys that differ from the run's (test_run_history.py); evaluating names the tensors.
    with pytest.raises(SystemExit) as exit_info:
        run(cli, "validate", run_dir, *args, "--ckpt_path=last")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"checkpoint {run_dir / 'checkpoints' / 'last.ckpt'} was written by a different model" in err
    assert detail in err
    assert digests(run_dir / "checkpoints") == before


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_evaluating_a_checkpoint_file_says_which_given_model_settings_it_replaces(
    cli: ModuleType, run_dir: Path, lightning_log: list[str], subcommand: str
) -> None:
    # LightningCLI builds the checkpoint's model for these: a preset or flag of the command was dropped without a word.
    checkpoint = f"--ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    evaluated = cli.build_cli([subcommand, checkpoint, "--model.init_args.hidden=8", "--model.init_args.lr=0.01"])
    assert evaluated.model.hparams.hidden == 32  # type: ignore[attr-defined]
    said = [line for line in lightning_log if "replace" in line]
    # lr 0.01 is the checkpoint's too: not named.
    assert said == [
        f"{subcommand}: the model is built with the checkpoint's settings (its weights were trained with them), which"
        " replace this command's: model.init_args.hidden 8 -> 32"
    ]
    lightning_log.clear()
    cli.build_cli([subcommand, checkpoint])  # nothing given: nothing replaced
    assert [line for line in lightning_log if "replace" in line] == []


def test_a_checkpoint_of_the_network_compiled_in_setup_loads_uncompiled(
    cli: ModuleType, run_dir: Path, tmp_path: Path
) -> None:
    # What a module that runs `self.net = torch.compile(self.net)` in `setup` writes (lightning-hydra-template): the
    # kit compared it with the model before `setup` and refused it as "written by a different model".
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["state_dict"] = {
        key.replace("net.", "net._orig_mod.", 1): v for key, v in checkpoint["state_dict"].items()
    }
    assert "net._orig_mod.0.weight" in checkpoint["state_dict"]
    compiled = tmp_path / "compiled.ckpt"
    torch.save(checkpoint, compiled)
    original = run(cli, "validate", run_dir, "--ckpt_path=last").trainer.callback_metrics["val/loss"]
    validated = run(cli, "validate", run_dir, f"--ckpt_path={compiled}")
    assert validated.trainer.callback_metrics["val/loss"] == original  # the same weights, each in its place
    resumed = run(cli, "fit", tmp_path / "resumed", f"--ckpt_path={compiled}")
    assert resumed.trainer.global_step == 2 * STEPS_PER_EPOCH  # loaded, loops included: nothing left to train


def test_a_model_loads_keys_with_or_without_orig_mod_as_it_holds_them() -> None:
    compiled_keys = submodule("safety.compiled_keys")

    class Holder(torch.nn.Module):
        def __init__(self, compiled: bool) -> None:
            super().__init__()
            net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
            self.net = torch.compile(net) if compiled else net  # compiles at the first call only: none here

    plain, wrapped = Holder(compiled=False), Holder(compiled=True)
    assert "net._orig_mod.0.weight" in wrapped.state_dict()
    for source, target in ((plain, wrapped), (wrapped, plain)):
        with torch.no_grad():
            for parameter in source.parameters():
                parameter.uniform_()
        with pytest.raises(RuntimeError, match="Missing key"):
            target.load_state_dict(source.state_dict())  # torch alone
        compiled_keys.load_either_form(target)
        target.load_state_dict(source.state_dict())
        loaded = {compiled_keys.plain_key(key): value for key, value in target.state_dict().items()}
        assert loaded.keys() == {compiled_keys.plain_key(key) for key in source.state_dict()}
        for key, value in source.state_dict().items():
            assert torch.equal(loaded[compiled_keys.plain_key(key)], value), key


def test_last_with_nothing_to_resume_starts_fresh_for_fit_and_exits_2_otherwise(
    cli: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str], lightning_log: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(cli, "validate", tmp_path / "run", "--ckpt_path=last")
    assert exit_info.value.code == 2
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == f"error: --ckpt_path last --run.name run: {tmp_path} has no run named 'run' (`runs` lists the runs)"
    fitted = run(cli, "fit", tmp_path / "run", "--ckpt_path=last")
    assert fitted.trainer.global_step == 2 * STEPS_PER_EPOCH
    assert any("nothing to resume" in line and "starts from scratch" in line for line in lightning_log)


def test_checkpoint_written_on_gpu_loads_on_cpu(cli: ModuleType, run_dir: Path, tmp_path: Path) -> None:
    # Re-save the checkpoint with every tensor tagged `cuda:0`, as a GPU run writes it (torch's own tagging hook).
    gpu = tmp_path / "gpu.ckpt"
    script = (
        "import sys, torch\n"
        "torch.serialization.register_package(0, lambda storage: 'cuda:0', lambda storage, location: None)\n"
        "torch.save(torch.load(sys.argv[1], weights_only=True), sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", script, str(run_dir / "checkpoints" / "last.ckpt"), str(gpu)], check=True)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(gpu, weights_only=True)  # the tags are real: a plain load needs a GPU
    original = run(cli, "validate", run_dir, "--ckpt_path=last").trainer.callback_metrics["val/loss"]
    moved = run(cli, "validate", run_dir, f"--ckpt_path={gpu}").trainer.callback_metrics["val/loss"]
    assert moved == original
    resumed = run(cli, "fit", tmp_path / "resumed", f"--ckpt_path={gpu}")
    assert resumed.trainer.global_step == 2 * STEPS_PER_EPOCH  # loops restored on the CPU: nothing left to train
    assert resumed.trainer.current_epoch == 2


@pytest.mark.gpu
def test_gpu_run_resumes_on_cpu(cli: ModuleType, tmp_path: Path) -> None:
    crash = fault("RaiseAtStep", step=STEPS_PER_EPOCH + 2)
    with pytest.raises(RuntimeError, match="injected crash"):
        run(cli, "fit", tmp_path / "run", "--trainer.accelerator=gpu", "--trainer.devices=1", crash)
    last = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == STEPS_PER_EPOCH
    resumed = run(cli, "fit", tmp_path / "run", "--trainer.accelerator=cpu", "--ckpt_path=last")
    assert resumed.trainer.global_step == 2 * STEPS_PER_EPOCH
    assert all(p.device.type == "cpu" for p in resumed.model.parameters())


def _save_forever(path: Path, checkpoint: dict[str, Any], atomic: bool) -> None:
    """Child process: rewrites ``path`` with an increasing step until it is killed."""
    for step in range(1, 1_000_000):
        checkpoint["step"] = step
        if atomic:
            checkpoint_io.AtomicCheckpointIO().save_checkpoint(checkpoint, path)
        else:
            torch.save(checkpoint, path)


@pytest.mark.slow
@pytest.mark.parametrize("atomic", [True, False], ids=["atomic", "plain-torch-save"])
def test_kill_9_while_saving_never_leaves_a_broken_checkpoint(tmp_path: Path, atomic: bool) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    checkpoint = {"state_dict": {"weight": torch.randn(2_000_000)}, "step": 0}  # 8 MB: a write takes a while
    path.parent.mkdir()
    torch.save(checkpoint, path)  # a good checkpoint from before the kills
    fork = multiprocessing.get_context("fork")  # starts at once: this process has imported torch already
    delays = random.Random(0)
    broken = 0
    for _ in range(12):
        writer = fork.Process(target=_save_forever, args=(path, checkpoint, atomic))
        writer.start()
        writer.join(timeout=delays.uniform(0.05, 0.2))  # a save takes 7-13 ms here: kill it after a few, mid-write
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
        assert writer.exitcode == -signal.SIGKILL
        try:
            loaded = torch.load(path, weights_only=True)
        except Exception:
            broken += 1
        else:
            assert torch.equal(loaded["state_dict"]["weight"], checkpoint["state_dict"]["weight"])
    if atomic:
        assert broken == 0
        assert len(list(path.parent.glob(".last.ckpt.*.tmp"))) <= 1  # a killed write's leftover, removed next time
    else:
        assert broken > 0  # the same kills do break a plain torch.save: this test can tell
