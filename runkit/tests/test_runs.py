"""Run directories: every fit its own folder, resume and evaluation find the newest run, ``<pkg> runs`` lists them."""

from __future__ import annotations

import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import submodule
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runkit.testing.faults import fault
from runkit.testing.support import refused, run_dir_flags

runs = submodule("run.folders")
run_logger = submodule("run.logger")
LIMITS = ["--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1"]  # 4 steps an epoch
SHORT = ["--trainer.max_epochs=1", *LIMITS]
EXPERIMENT = Path("runs/fixture")


def folders() -> list[Path]:
    return sorted(path for path in EXPERIMENT.iterdir() if path.is_dir())


def test_two_fits_leave_two_intact_runs(run_cli: Callable[..., object]) -> None:
    run_cli("fit", *SHORT, "--model.init_args.lr=0.01")
    (first,) = folders()
    best = (first / "checkpoints" / "best.ckpt").read_bytes()
    run_cli("fit", *SHORT, "--model.init_args.lr=0.05")
    assert len(folders()) == 2
    second = next(path for path in folders() if path != first)
    assert (first / "checkpoints" / "best.ckpt").read_bytes() == best
    for run, lr in ((first, 0.01), (second, 0.05)):
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["model"]["init_args"]["lr"] == lr
        assert config["run"]["name"] == run.name  # the saved config names its own run
        assert len(list(run.glob("events.out.tfevents.*"))) == 1
        assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


def test_a_trainer_that_cannot_be_built_leaves_no_run(run_cli: Callable[..., object]) -> None:
    # A traceback today, an `error:` line (exit 2) once the CLI reports it: either way, nothing is written.
    with pytest.raises((ValueError, SystemExit)):
        run_cli("fit", "--trainer.strategy=no_such_strategy")
    assert not Path("runs").exists()


def test_runs_started_in_the_same_second_get_their_own_folders(tmp_path: Path) -> None:
    start, made = threading.Barrier(8), []

    def create() -> None:
        start.wait()
        made.extend(runs.create_run(tmp_path, None) for _ in range(3))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == len(set(made)) == 24
    assert all(path.is_dir() and not any(path.iterdir()) for path in made)


def test_ckpt_path_last_and_best_find_the_newest_run_that_has_the_file(
    run_cli: Callable[..., object], lightning_log: list[str]
) -> None:
    three_epochs = [*SHORT, "--trainer.max_epochs=3"]  # 4 steps each
    with pytest.raises(RuntimeError, match="injected crash"):
        run_cli("fit", *three_epochs, fault("RaiseAtStep", step=6))
    (older,) = folders()
    with pytest.raises(RuntimeError, match="injected crash"):  # a newer run that dies before its first checkpoint
        run_cli("fit", *three_epochs, fault("RaiseAtStep", step=2))
    assert len(folders()) == 2
    with pytest.raises(RuntimeError, match="injected crash"):
        run_cli("fit", *three_epochs, "--ckpt_path=last", fault("RaiseAtStep", step=10))
    assert f"Run {older}: resumed from {older / 'checkpoints' / 'last.ckpt'}, seed 42" in lightning_log
    assert torch.load(older / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 8
    # A path to a run's checkpoint continues that run too, in its own folder.
    finished = run_cli("fit", *three_epochs, f"--ckpt_path={older / 'checkpoints' / 'last.ckpt'}")
    assert finished.trainer.global_step == 12
    assert len(folders()) == 2
    sessions = yaml.safe_load((older / "provenance.yaml").read_text())["sessions"]
    assert [session["status"] for session in sessions] == ["failed", "failed", "finished"]
    assert sessions[0]["error"] == "RuntimeError: injected crash after step 6"
    validated = run_cli("validate", "--ckpt_path=best")
    assert validated.trainer.default_root_dir == str(older)
    assert any(line.startswith(f"Checkpoint {older / 'checkpoints' / 'best.ckpt'}: epoch") for line in lightning_log)
    assert len(folders()) == 2


@pytest.mark.slow  # a process to kill
def test_a_killed_run_resumes_into_one_continuous_curve(
    cli: ModuleType, run_process: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # SIGKILL in epoch 1, once the save of epoch 0's end (in the background) has committed: last.ckpt holds it.
    killed = run_process("fit", fault("SignalAtStep", step=20, settled=True))
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    (run,) = folders()
    cli.build_cli(["fit", "--ckpt_path=last"])
    assert folders() == [run]
    accumulator = EventAccumulator(str(run), size_guidance={"scalars": 0})  # all events files, as TensorBoard reads
    accumulator.Reload()
    steps = {tag: [event.step for event in accumulator.Scalars(tag)] for tag in ("train/loss_step", "val/loss")}
    assert steps == {"train/loss_step": list(range(32)), "val/loss": [15, 31]}  # steps 16-20 once, not twice
    sessions = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
    assert [(session["ended"] is None, session["status"]) for session in sessions] == [
        (True, None),
        (False, "finished"),
    ]


def test_a_resume_within_the_second_of_its_kill_still_sorts_after_it(tmp_path: Path) -> None:
    # TensorBoard reads events files in name order, and the name starts with the second of creation.
    run = tmp_path / "fixture" / "run"
    run.mkdir(parents=True)
    # The killed session's file, from this second, by a process whose pid sorts after this one's.
    earlier = run / f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.999999999.0"
    earlier.write_bytes(b"")
    logger = run_logger.RunLogger(run, purge_step=5)
    logger.log_metrics({"train/loss_step": 1.0}, step=5)
    logger.finalize("success")
    assert sorted(path.name for path in run.glob("events.out.tfevents.*"))[0] == earlier.name


def test_an_existing_named_run_is_resumed_never_overwritten(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str]
) -> None:
    run = EXPERIMENT / "named"
    run_cli("fit", *run_dir_flags(run), *SHORT)
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    with pytest.raises(SystemExit) as refused:
        run_cli("fit", *run_dir_flags(run), *SHORT)
    assert refused.value.code == 2
    assert f"error: run {run} exists: resume it with --ckpt_path last" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


def test_only_the_fit_that_creates_a_run_writes_its_config(cli: ModuleType, run_cli: Callable[..., object]) -> None:
    run = EXPERIMENT / "crashed"
    with pytest.raises(RuntimeError, match="injected crash"):
        run_cli("fit", *run_dir_flags(run), *LIMITS, fault("RaiseAtStep", step=6, marker="crashed"))
    config = (run / "config.yaml").read_bytes()
    run_cli("validate", *run_dir_flags(run), "--ckpt_path=last", "--verbose=false")
    run_cli("predict", *run_dir_flags(run), "--ckpt_path=last")
    assert (run / "config.yaml").read_bytes() == config
    # The README's resume command: the saved config parses for `fit` and names this run.
    resumed = cli.build_cli(["fit", f"--config={run / 'config.yaml'}", "--ckpt_path=last"])
    assert resumed.trainer.global_step == 8
    assert (run / "config.yaml").read_bytes() == config


def test_runs_lists_each_run_with_its_status_and_the_command_to_continue(
    cli: ModuleType, run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], lightning_log: list[str]
) -> None:
    run_cli("fit", *run_dir_flags(EXPERIMENT / "finished"), *LIMITS)
    with pytest.raises(SystemExit) as stopped:
        run_cli(
            "fit",
            *run_dir_flags(EXPERIMENT / "stopped"),
            *LIMITS,
            fault("SignalAtStep", step=2, signum=int(signal.SIGTERM)),
        )
    assert stopped.value.code == 143
    # Without a progress bar, one line per epoch.
    lines = [line for line in lightning_log if line.startswith("epoch ")]
    assert [line.split("  ")[:2] for line in lines] == [["epoch 1/2", "step 4"], ["epoch 2/2", "step 8"]]
    assert all("train/loss " in line and "val/loss " in line and line.endswith(" s") for line in lines)
    capsys.readouterr()
    cli.main(["runs"])
    header, *rows = capsys.readouterr().out.strip().splitlines()
    columns = ["EXPERIMENT", "RUN", "STARTED", "STATUS", "EPOCHS", "STEPS", "BEST", "PROCESSES", "COMMAND"]
    assert header.split() == columns
    table = {row.split()[1]: row.split() for row in rows}  # STARTED is two words: date and time
    assert table["finished"][4:7] == ["finished", "2", "8"]
    assert table["finished"][7].startswith("val/loss=")
    assert table["finished"][8] == "1"  # one session, on one process
    assert " ".join(table["finished"][9:]).endswith("validate -c runs/fixture/finished/config.yaml --ckpt_path best")
    assert table["stopped"][4:9] == ["preempted", "0", "2", "-", "1"]  # stopped right after step 2
    resume = " ".join(table["stopped"][9:])
    assert resume.endswith("fit -c runs/fixture/stopped/config.yaml --ckpt_path last")
    resumed = cli.build_cli(shlex.split(resume)[1:])
    assert resumed.trainer.global_step == 8


def test_runs_skips_a_provenance_yaml_that_is_not_a_record_and_names_it(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli("fit", *run_dir_flags(EXPERIMENT / "real"), *SHORT)
    # Files named provenance.yaml that no `fit` wrote: a run's config copied there, another tool's sessions.
    foreign = {"copied": (EXPERIMENT / "real" / "config.yaml").read_text(), "other": "sessions:\n- user: me\n"}
    for name, text in foreign.items():
        (EXPERIMENT / name).mkdir()
        (EXPERIMENT / name / "provenance.yaml").write_text(text)
    capsys.readouterr()
    table = runs.format_runs(Path("runs"))
    assert [row.split()[1:5:3] for row in table.splitlines()[1:]] == [["real", "finished"]]  # was: both `killed`
    err = capsys.readouterr().err
    for name, problem in (("copied", "no sessions"), ("other", "sessions[0]: no start time")):
        assert f"warning: {EXPERIMENT / name / 'provenance.yaml'}: not a provenance record ({problem}); skipped" in err


def test_every_printed_command_is_quoted_for_the_shell(
    run_cli: Callable[..., object], run_process: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # A run in `x y/ü z`: pasted into a shell, `runs`' command and the end-of-fit lines run it (each word one argument).
    run_dir = Path("x y/ü z/a b")
    printed = run_process("fit", *run_dir_flags(run_dir), *SHORT).stdout.splitlines()
    closing = [line.split(":", 1)[1].strip() for line in printed if line.startswith(("  validate:", "  continue:"))]
    command = run_process("runs", "--root", "x y").stdout.strip().splitlines()[-1].split("  ")[-1].strip()
    pasted = [shlex.split(line.replace(" --trainer.max_epochs <more>", "")) for line in [command, *closing]]
    assert [words[1:4] for words in pasted] == [
        ["validate", "-c", str(run_dir / "config.yaml")],
        ["validate", "-c", str(run_dir / "config.yaml")],
        ["fit", "-c", str(run_dir / "config.yaml")],
    ]
    validated = run_cli(*pasted[0][1:])
    assert validated.trainer.ckpt_path == str(run_dir / "checkpoints" / "best.ckpt")  # type: ignore[attr-defined]
    tensorboard = next(line for line in printed if line.startswith("  TensorBoard:"))
    assert shlex.split(tensorboard.split(":", 1)[1]) == ["tensorboard", "--logdir", str(run_dir)]


@pytest.mark.parametrize("name", ["a\nb", "tab\there"])
def test_a_run_name_with_a_control_character_is_refused_in_one_line(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], name: str
) -> None:
    error = refused(capsys, lambda: run_cli("fit", f"--run.name={name}", *SHORT))  # exit 2, one line, no traceback
    assert error == f"error: run.name must be a folder name without control characters, got {name!r}"
    assert not Path("runs").exists()
