"""A run whose root is an fsspec URL (``memory://`` here, in this process; ``s3://`` on a server: test_s3.py) lives
there, whole: no local folder named after the URL, the same resume, checks and listing as a local run."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

import fsspec
import pytest
import torch
import yaml
from fsspec.registry import known_implementations as KNOWN
from tracker_setup import clear_tracker_environment, needs, tracker_flags

from runkit import store
from runkit.project import Project
from runkit.run.folders import format_runs
from runkit.run.lock import RunLock, RunLockedError
from runkit.safety.checkpoint_io import CheckpointWriteError
from runkit.safety.digests import verify
from runkit.store import StorePath, location
from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, fit_exit_code, refused

EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")


@pytest.fixture
def bucket() -> Iterator[str]:
    """A folder of its own in fsspec's memory store (this process's), removed afterwards."""
    name = f"bucket-{uuid.uuid4().hex[:8]}"
    yield f"memory://{name}/runs"
    with contextlib.suppress(FileNotFoundError):  # nothing written
        fsspec.filesystem("memory").rm(f"/{name}", recursive=True)


def load(path: StorePath | Path) -> dict:
    return torch.load(path.open("rb") if isinstance(path, StorePath) else path, weights_only=True)


def exit_code(cli: ModuleType, *args: str) -> int:
    """Runs a command in this process; its exit code (0: it ended normally)."""
    try:
        cli.build_cli(list(args))
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


def local_folders_named_after(url: str, below: Path) -> list[Path]:
    """Folders under ``below`` named as ``Path(url)`` names them (``memory:``, ``s3:``): a run written locally."""
    protocol = url.partition("://")[0]
    return [path for path in below.rglob(f"{protocol}:*")]


def test_a_run_in_a_store_stops_resumes_exactly_and_is_listed(
    cli: ModuleType, in_tmp: Path, bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    straight = tmp_path_factory.mktemp("straight") / "runs" / "fixture" / "straight"
    assert fit_exit_code(cli, straight) == 0
    run = location(bucket) / "fixture" / "cut"
    flags = [f"--trainer.default_root_dir={bucket}", "--run.name=cut"]
    stop = fault("SignalAtStep", step=20, signum=15)
    assert exit_code(cli, "fit", *flags, stop, "--last_checkpoint.every_n_train_steps=1") == 143
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 20
    listed = format_runs(location(bucket))
    assert "preempted" in listed
    assert f"fit -c {bucket}/fixture/cut/config.yaml --ckpt_path last" in listed
    # The command `runs` gives: the run's config, read from the store, names the run.
    assert exit_code(cli, "fit", "-c", f"{run}/config.yaml", "--ckpt_path=last", "--seed_everything=7") == 0
    resumed, expected = load(run / "checkpoints" / "last.ckpt"), load(straight / "checkpoints" / "last.ckpt")
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)
    record = yaml.safe_load((run / "provenance.yaml").read_text())
    assert [session["status"] for session in record["sessions"]] == ["preempted", "finished"]
    assert record["checkpoints"]["checkpoints/last.ckpt"]["step"] == 32
    assert {path.name for path in run.iterdir()} >= {"config.yaml", "provenance.yaml", "checkpoints"}
    assert any(path.name.startswith("events.out.tfevents") for path in run.iterdir())  # TensorBoard's, there too
    assert not (run / ".lock").exists()  # given back
    assert local_folders_named_after(bucket, in_tmp) == []
    assert "finished" in format_runs(location(bucket))
    assert exit_code(cli, "validate", "-c", f"{run}/config.yaml", "--ckpt_path=best") == 0  # read from the store
    assert exit_code(cli, "validate", f"--trainer.default_root_dir={bucket}", "--ckpt_path=last") == 0  # the newest
    writer = "--trainer.callbacks+=runkit.tools.prediction.PredictionWriter"
    assert exit_code(cli, "predict", "-c", f"{run}/config.yaml", "--ckpt_path=best", writer) == 0
    (predicted,) = (run / "predictions").iterdir()
    assert {path.name for path in predicted.iterdir()} == {"predictions.pt", "predictions.csv"}


def test_a_checkpoint_in_a_store_is_checked_against_its_digest(
    cli: ModuleType, in_tmp: Path, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [f"--trainer.default_root_dir={bucket}", "--run.name=r", "--trainer.max_epochs=1"]
    assert exit_code(cli, "fit", *flags) == 0
    last = location(bucket) / "fixture" / "r" / "checkpoints" / "last.ckpt"
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 1  # one bit, somewhere in a tensor's bytes
    last.write_bytes(bytes(data))
    line = refused(capsys, lambda: cli.build_cli(["validate", *flags, "--ckpt_path=last"]))
    assert "is not the file its run wrote" in line, line
    assert local_folders_named_after(bucket, in_tmp) == []


@pytest.mark.parametrize(
    ("root", "extra"), [("gs://bucket/runs", "gcs"), ("az://container/runs", "azure"), ("nope://x/runs", None)]
)
def test_a_store_whose_filesystem_is_missing_is_one_line_and_writes_nothing(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], root: str, extra: str | None
) -> None:
    protocol = root.partition(":")[0]
    if extra is not None and importlib.util.find_spec(KNOWN[protocol]["class"].split(".")[0]) is not None:
        pytest.skip(f"{protocol}'s filesystem is installed here")
    line = refused(capsys, lambda: cli.build_cli(["fit", f"--trainer.default_root_dir={root}"]))
    assert root in line
    assert (f'pip install -e ".[{extra}]"' if extra else f"no filesystem knows the protocol {protocol}://") in line
    assert list(in_tmp.iterdir()) == []


def test_the_missing_filesystem_names_the_projects_extra_where_it_declares_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "current", lambda: Project(program="runkit"))  # a distribution that declares `s3`
    assert store.install_hint("s3") == 'the project\'s `s3` extra: pip install -e ".[s3]"'
    monkeypatch.setattr(store, "current", lambda: Project(program="a-project-not-installed"))
    assert store.install_hint("s3") == (
        'runkit\'s `s3` extra: pip install "runkit[s3]" (pip install -e ".[s3]" in runkit/)'
    )


def test_a_run_in_a_store_is_locked_by_a_conditional_write(bucket: str) -> None:
    run = location(bucket) / "fixture" / "locked"
    assert isinstance(run, StorePath)
    first, second = RunLock(run), RunLock(run)
    first.acquire()
    try:
        with pytest.raises(FileExistsError):
            (run / ".lock").create_new(b"another writer")  # what a second process's lock is told
        with pytest.raises(RunLockedError, match=f"process {os.getpid()} on"):
            second.acquire()
    finally:
        first.release()
    assert not (run / ".lock").exists()
    second.acquire()  # free again
    second.release()


def test_a_stale_lock_in_a_store_is_taken_over(bucket: str) -> None:
    run = location(bucket) / "fixture" / "stale"
    (run / ".lock").write_text(yaml.safe_dump({"host": "gone", "pid": 1, "since": "2020-01-01"}))
    lock = RunLock(run)
    lock.path.fs.store[lock.path.path].created = datetime(
        2020, 1, 1, tzinfo=timezone.utc
    )  # long ago, never refreshed: its holder is gone
    lock.acquire()
    assert yaml.safe_load((run / ".lock").read_text())["pid"] == os.getpid()
    lock.release()


def test_a_failed_upload_leaves_the_last_checkpoint_and_the_record_as_they_were(
    cli: ModuleType, in_tmp: Path, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = location(bucket) / "fixture" / "lost"
    upload = StorePath.write_bytes

    def lost_after_the_first_epoch(path: StorePath, data: bytes) -> None:
        if path.name == "last.ckpt" and path.exists():
            raise ConnectionResetError("connection reset by peer")  # the store never got the whole object
        upload(path, data)

    with monkeypatch.context() as patch:
        patch.setattr(StorePath, "write_bytes", lost_after_the_first_epoch)
        with pytest.raises(CheckpointWriteError, match=r"cannot write checkpoint .*last\.ckpt"):
            cli.build_cli(["fit", f"--trainer.default_root_dir={bucket}", "--run.name=lost"])
    last = run / "checkpoints" / "last.ckpt"
    assert load(last)["global_step"] == 16  # the first epoch's, whole
    verify(last, last.read_bytes())  # its recorded digest, the failed one's only pending
    record = yaml.safe_load((run / "provenance.yaml").read_text())
    assert record["progress"]["step"] == 16  # not ahead of what last.ckpt holds
    entry = record["checkpoints"]["checkpoints/last.ckpt"]
    assert entry["step"] == 16
    assert entry["pending"]["step"] == 32


def test_lr_find_writes_its_preset_into_the_store(cli: ModuleType, in_tmp: Path, bucket: str) -> None:
    flags = [f"--trainer.default_root_dir={bucket}", "--run.name=found"]
    assert exit_code(cli, "lr_find", *flags, "--num_training=20", "--max_lr=0.01") == 0
    preset = location(bucket) / "fixture" / "found" / "lr_find.yaml"
    assert "lr:" in preset.read_text()
    assert not any(path.name.startswith(".lr_find") for path in preset.parent.iterdir())  # Lightning's, removed
    assert local_folders_named_after(bucket, in_tmp) == []


def test_search_into_a_store_is_one_line_and_writes_nothing(
    cli: ModuleType, in_tmp: Path, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("optuna", reason="the search needs the `search` extra (Optuna)")
    line = refused(capsys, lambda: cli.main(["search", f"--trainer.default_root_dir={bucket}"]))
    assert "a search keeps its study and its trials in a local folder" in line, line
    assert not location(bucket).exists()
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("tracker", "expected"),
    [("mlflow", "MLFlowLogger without a tracking_uri keeps a local store"), ("wandb", "WandbLogger writes its files")],
)
def test_a_tracker_that_writes_local_files_is_refused_for_a_store(
    cli: ModuleType,
    in_tmp: Path,
    bucket: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tracker: str,
    expected: str,
) -> None:
    needs(tracker)
    clear_tracker_environment(monkeypatch)
    flags = tracker_flags(tracker, **{tracker: {"offline": True} if tracker == "wandb" else {}})
    line = refused(capsys, lambda: cli.build_cli(["fit", f"--trainer.default_root_dir={bucket}", flags]))
    assert expected in line, line
    assert not location(bucket).exists()
    assert [path.name for path in in_tmp.iterdir()] == ["trackers.yaml"]  # the test's own config


def test_export_reads_a_checkpoint_from_the_store_into_a_local_folder_only(
    cli: ModuleType, in_tmp: Path, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [f"--trainer.default_root_dir={bucket}", "--run.name=r", "--ckpt_path=last", "--formats=[torch_export]"]
    assert exit_code(cli, "fit", *flags[:2], "--trainer.max_epochs=1") == 0
    line = refused(capsys, lambda: cli.build_cli(["export", *flags]))
    assert "export writes a local folder" in line, line
    assert local_folders_named_after(bucket, in_tmp) == []
    assert exit_code(cli, "export", *flags, f"--output_dir={in_tmp / 'exported'}") == 0
    assert (in_tmp / "exported" / "model.pt2").is_file()


def test_a_url_is_a_store_path_and_a_local_one_a_path(tmp_path: Path) -> None:
    assert location(f"file://{tmp_path}") == tmp_path  # file:// is local: the kit's atomic local writes
    assert location("runs") == Path("runs")
    run = location("memory://bucket/runs") / "fixture" / "r"
    assert isinstance(run, StorePath)
    assert str(run) == "memory://bucket/runs/fixture/r"  # as given: the URL, never `memory:/bucket/...`
    assert (run.name, str(run.parent), str(run.parent.parent)) == ("r", f"{run.url[:-2]}", "memory://bucket/runs")
    assert str(location("memory://bucket").parent) == "memory://bucket"  # the top stays, as Path("/").parent
    assert str((run / "checkpoints" / "last.ckpt").with_suffix(".png")) == f"{run}/checkpoints/last.png"
    assert (run / "config.yaml").relative_to(run) == Path("config.yaml")
    assert not hasattr(run, "__fspath__")  # handed to open() or os, it fails instead of writing locally
    assert location(run) is run


def test_a_fit_in_memory_says_at_its_start_that_the_run_ends_with_the_process(
    in_tmp: Path, bucket: str, run_process: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # `fit --trainer.default_root_dir memory://...` exited 0, and the run was gone with the process, without a word.
    done = run_process("fit", f"--trainer.default_root_dir={bucket}", "--run.name=r", "--trainer.max_epochs=1")
    assert done.returncode == 0, done.stdout[-3000:]
    first = next(line for line in done.stdout.splitlines() if line.startswith("Run "))
    assert first == (
        f"Run {bucket}/fixture/r: new, seed 42; memory:// is this process's own store: the run is gone when the"
        " process ends"
    )
    assert local_folders_named_after(bucket, in_tmp) == []
