"""Provenance: every run and every checkpoint says where it came from and how each session ended."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import submodule

from runkit.testing.support import refused, run_dir_flags

provenance = submodule("run.provenance")
facts = submodule("run.facts")
records = submodule("run.records")
RUN = Path("runs/fixture/traced")


def test_provenance_is_in_the_run_and_in_every_checkpoint(
    run_cli: Callable[..., object], lightning_log: list[str]
) -> None:
    run_cli("fit", *run_dir_flags(RUN), "--trainer.limit_val_batches=1", "--seed_everything=3")
    record = yaml.safe_load((RUN / "provenance.yaml").read_text())
    (session,) = record["sessions"]
    assert session["command"].split()[1:3] == ["fit", f"--trainer.default_root_dir={RUN.parent.parent}"]
    assert session["seed"] == 3
    assert session["status"] == "finished"
    assert session["started"] < session["ended"]
    assert session["host"] == socket.gethostname()
    assert (session["devices"]["accelerator"], session["devices"]["world_size"]) == ("cpu", 1)
    assert set(session["versions"]) == {"python", "torch", "cuda", "lightning", "torchmetrics", "jsonargparse"}
    assert session["versions"]["torch"] == str(torch.__version__)
    assert (record["progress"]["epochs"], record["progress"]["step"]) == (2, 32)
    assert record["progress"]["best"]["monitor"] == "val/loss"
    for name in ("best.ckpt", "last.ckpt"):
        carried = torch.load(RUN / "checkpoints" / name, weights_only=True)["provenance"]
        assert carried["config"] == (RUN / "config.yaml").read_text()  # the resolved config, inline
        assert carried["sessions"][0]["command"] == session["command"]
    run_cli("validate", *run_dir_flags(RUN), "--ckpt_path=best")
    (line,) = [line for line in lightning_log if line.startswith("Checkpoint ")]
    assert f"of run fixture/traced, started {session['started']}" in line
    assert line.endswith(f"by `{session['command']}`")


class Killed(BaseException):
    """Stands for a SIGKILL: nothing after it runs in the process that would write a file."""


def test_provenance_is_never_ahead_of_last_ckpt(
    run_cli: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint_io = submodule("safety.checkpoint_io")
    save = checkpoint_io.atomic_save

    def save_or_die(checkpoint: dict[str, object], path: Path, before_replace: Callable[..., object]) -> None:
        if path.name == "last.ckpt" and checkpoint["global_step"] == 4:
            raise Killed  # the process dies before the second last.ckpt is on disk
        save(checkpoint, path, before_replace)

    monkeypatch.setattr(checkpoint_io, "atomic_save", save_or_die)
    with pytest.raises(Killed):
        run_cli("fit", *run_dir_flags(RUN), "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1")
    saved = torch.load(RUN / "checkpoints" / "last.ckpt", weights_only=True)
    progress = yaml.safe_load((RUN / "provenance.yaml").read_text())["progress"]
    # The progress was written before the checkpoint it describes: after a kill it claimed steps that no file holds.
    assert (progress["epochs"], progress["step"]) == (1, 2) == (saved["epoch"] + 1, saved["global_step"])


MALFORMED = [
    ("sessions: oops\nprogress: [1]\n", "sessions: expected a list, got str"),
    ("progress:\n  best: {monitor: val/loss}\nsessions: []\n", "progress.best: expected monitor and value"),
    ("sessions: [1, 2\n", "not YAML"),
]


@pytest.fixture(scope="module")
def trained(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("trained") / "good"
    cli.build_cli(["fit", *run_dir_flags(run), "--trainer.max_epochs=1", "--trainer.limit_train_batches=2"])
    return run


@pytest.fixture
def broken_run(trained: Path, in_tmp: Path) -> tuple[Path, Path]:
    """A good run, and a newer copy of it whose provenance.yaml is to be broken, in ``runs/fixture``."""
    good = Path(shutil.copytree(trained, "runs/fixture/good"))
    return good, Path(shutil.copytree(good, good.with_name("broken")))


@pytest.mark.parametrize(("content", "reason"), MALFORMED, ids=["sessions", "best", "yaml"])
def test_a_malformed_record_is_named_and_never_crashes_runs_or_a_resume(
    run_cli: Callable[..., object],
    capsys: pytest.CaptureFixture[str],
    broken_run: tuple[Path, Path],
    content: str,
    reason: str,
) -> None:
    _, broken = broken_run
    record = broken / "provenance.yaml"
    record.write_text(content)
    runs = submodule("run.folders")
    runs.format_runs(Path("runs"))  # was: AttributeError: 'str' object has no attribute 'get'
    err = capsys.readouterr().err
    assert f"warning: {record}: not a provenance record ({reason}); skipped" in err
    # Resuming it would write a new record over the one it has: refused, the file named.
    last = broken / "checkpoints" / "last.ckpt"
    line = refused(capsys, lambda: run_cli("fit", *run_dir_flags(broken), f"--ckpt_path={last}"))
    assert line.startswith(f"error: {record}: not a provenance record ({reason})"), line
    assert record.read_text() == content


def test_a_run_with_a_malformed_record_is_skipped_by_runs_and_by_best_and_last(
    run_cli: Callable[..., object], broken_run: tuple[Path, Path]
) -> None:
    good, broken = broken_run
    (broken / "provenance.yaml").write_text(MALFORMED[0][0])
    runs = submodule("run.folders")
    assert "broken" not in runs.format_runs(Path("runs"))
    for alias in ("best", "last"):
        validated = run_cli("validate", f"--ckpt_path={alias}", "--trainer.limit_val_batches=1")
        assert Path(validated.trainer.default_root_dir).resolve() == good.resolve()


def test_a_drawn_seed_is_random_and_shared_by_the_processes_of_one_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PL_GLOBAL_SEED", *facts.JOB_IDS):
        monkeypatch.delenv(name, raising=False)
    assert len({facts.drawn_seed() for _ in range(4)}) == 4  # Lightning 2.6 seeds 0 for `true`, every time
    monkeypatch.setenv("PL_GLOBAL_SEED", "123")  # what Lightning's launcher gives the processes it starts
    assert facts.drawn_seed() == 123
    monkeypatch.delenv("PL_GLOBAL_SEED")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # processes started by the scheduler: each draws the same
    assert facts.drawn_seed() == facts.drawn_seed() < 2**32


def test_seed_everything_true_draws_a_seed_and_records_it(
    run_cli: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = []
    for name in ("a", "b"):
        monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
        run = RUN.with_name(name)
        short = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=1"]
        run_cli("fit", *run_dir_flags(run), "--seed_everything=true", *short)
        (session,) = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
        assert session["seed"] == int(os.environ["PL_GLOBAL_SEED"])  # the seed the run used
        assert yaml.safe_load((run / "config.yaml").read_text())["seed_everything"] == session["seed"]
        seeds.append(session["seed"])
    assert seeds[0] != seeds[1]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_dirty_flag_and_diff_of_tracked_files(tmp_path: Path) -> None:
    assert facts.git_state(tmp_path) is None  # not a repository
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "train.py").write_text("lr = 0.1\n")
    git("add", "train.py")
    git("commit", "-qm", "first")
    clean = facts.git_state(tmp_path)
    assert clean == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False, "diff": ""}
    (tmp_path / "train.py").write_text("lr = 0.2\n")
    (tmp_path / "untracked.py").write_text("x = 1\n")
    dirty = facts.git_state(tmp_path / ".")
    assert dirty["dirty"]
    assert dirty["commit"] == clean["commit"]
    assert "-lr = 0.1\n+lr = 0.2" in dirty["diff"]
    assert "untracked" not in dirty["diff"]


def test_how_a_session_ended() -> None:
    preemption = submodule("safety.preemption")
    nonfinite = submodule("safety.nonfinite")
    assert provenance.status_of(None) == ("finished", None)
    assert provenance.status_of(SystemExit(128 + signal.SIGTERM)) == ("preempted", None)
    assert provenance.status_of(preemption.Interrupted()) == ("interrupted", None)
    assert provenance.status_of(nonfinite.NonFiniteLossError("loss is nan\nmore")) == ("nonfinite", "loss is nan")
    assert provenance.status_of(RuntimeError("boom")) == ("failed", "RuntimeError: boom")
    open_session = {"host": socket.gethostname(), "status": None}
    assert records.session_status({"sessions": [{**open_session, "pid": os.getpid()}]}) == "running"
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert records.session_status({"sessions": [{**open_session, "pid": dead.pid}]}) == "killed"
