"""Bad checkpoints and export arguments on the fixture task: one ``error:`` line naming the file, exit 2, nothing
written or changed; and what must not be refused: two runs saving into one checkpoint folder, a checkpoint in
torch's legacy format, a folder that becomes unwritable mid-run (exit 1, what was saved stays).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

import fixture_task
import lightning.pytorch as pl
import pytest
import torch
from support import submodule
from torch import Tensor

from runkit.testing.support import digest, read_only, refused, run_dir_flags

checkpoint_io = submodule("safety.checkpoint_io")

RunCli = Callable[..., object]


def refused_cli(run_cli: RunCli, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one ``error:`` line of a command that must exit 2."""
    return refused(capsys, lambda: run_cli(*args))


def files_in(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.fixture(scope="module")
def trained(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the fixture task (one epoch); tests read its checkpoints."""
    run_dir = tmp_path_factory.mktemp("trained") / "runs" / "fixture" / "trained"
    cli.build_cli(["fit", *run_dir_flags(run_dir), "--trainer.max_epochs=1"])
    return run_dir


# --- checkpoints ------------------------------------------------------------------------------------------------


def _save_repeatedly(path: Path, times: int) -> None:
    """Child process: one of two runs that write the same checkpoint file."""
    checkpoint = {"state_dict": {"weight": torch.randn(1_000_000)}}  # 4 MB: the writes overlap
    for _ in range(times):
        checkpoint_io.atomic_save(checkpoint, path)


def test_two_writers_in_one_checkpoint_folder_both_succeed(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    fork = multiprocessing.get_context("fork")  # starts at once: this process has imported torch already
    writers = [fork.Process(target=_save_repeatedly, args=(path, 40)) for _ in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [writer.exitcode for writer in writers] == [0, 0]  # neither lost its temporary file to the other
    assert torch.load(path, weights_only=True)["state_dict"]["weight"].shape == (1_000_000,)
    assert list(path.parent.glob(".last.ckpt.*.tmp")) == []


def test_only_a_dead_writers_temporary_file_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    finished = multiprocessing.get_context("fork").Process(target=int)
    finished.start()
    finished.join()
    host = socket.gethostname()
    live = tmp_path / f".last.ckpt.{os.getppid()}@{host}.0a1b2c3d.tmp"  # pytest's parent: alive
    dead = tmp_path / f".last.ckpt.{finished.pid}@{host}.0a1b2c3d.tmp"
    elsewhere = tmp_path / f".last.ckpt.{finished.pid}@another-host.0a1b2c3d.tmp"  # judged by age: recent
    for partial in (live, dead, elsewhere):
        partial.write_bytes(b"half a checkpoint")
    checkpoint_io.atomic_save({"state_dict": {}}, path)
    assert (live.exists(), dead.exists(), elsewhere.exists()) == (True, False, True)
    os.utime(elsewhere, (0, 0))  # a day and more old: its writer is long gone
    checkpoint_io.atomic_save({"state_dict": {}}, path)
    assert not elsewhere.exists()


def test_a_legacy_format_checkpoint_is_accepted(cli: ModuleType, trained: Path, tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.ckpt"
    checkpoint = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    torch.save(checkpoint, legacy, _use_new_zipfile_serialization=False)  # torch < 1.6's format
    flags = run_dir_flags(tmp_path / "runs" / "fixture" / "validate")
    original = cli.build_cli(["validate", *flags, f"--ckpt_path={trained / 'checkpoints' / 'last.ckpt'}"])
    loaded = cli.build_cli(["validate", *flags, f"--ckpt_path={legacy}"])
    assert loaded.trainer.callback_metrics["val/loss"] == original.trainer.callback_metrics["val/loss"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path, good: path.write_bytes(b""), "is empty (0 bytes)"),
        (
            lambda path, good: torch.save({**good, "origin": Path("/somewhere")}, path),
            "holds pickled Python objects and is refused (it needs pathlib.PosixPath)",
        ),
        (
            lambda path, good: path.write_bytes(bytes(range(7, 107))),
            "is not readable (truncated or corrupt?): Unsupported",
        ),
    ],
    ids=["empty", "pickled-object", "random-bytes"],
)
def test_a_checkpoint_error_is_plain_text_naming_the_file(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path, make: Any, message: str
) -> None:
    bad = Path("bad.ckpt")
    make(bad, torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True))
    line = refused_cli(run_cli, capsys, "validate", f"--ckpt_path={bad}")
    assert f"checkpoint bad.ckpt {message}" in line
    assert "\x1b" not in line  # torch's message carries terminal colour codes


def test_a_checkpoint_of_another_architecture_names_the_keys_and_shapes(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path
) -> None:
    # `best` by name: given a file, LightningCLI would rebuild the model from the hyperparameters inside it.
    line = refused_cli(
        run_cli, capsys, "validate", *run_dir_flags(trained), "--model.init_args.hidden=8", "--ckpt_path=best"
    )
    assert "than the configured fixture_task.SequenceRegressor (the same class with other arguments)" in line
    assert (
        "other shape (3): net.0.weight 32x16 vs 8x16, net.0.bias 32 vs 8, net.3.weight 1x32 vs 1x8 (checkpoint vs"
        in line
    )
    line = refused_cli(
        run_cli, capsys, "validate", *run_dir_flags(trained), "--model=fixture_task.LinearRegressor", "--ckpt_path=best"
    )
    assert "than the configured fixture_task.LinearRegressor (by fixture_task.SequenceRegressor)" in line
    assert (
        "missing (2): net.1.bias, net.1.weight; unexpected (4): net.0.bias, net.0.weight, net.3.bias, net.3.weight"
        in line
    )


def _save_on_a_full_disk(path: Path, result: Any) -> None:
    """Child process: a file size limit makes writes fail as a full disk does (EFBIG instead of ENOSPC)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of the process being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
    try:
        checkpoint_io.atomic_save({"state_dict": {"weight": torch.randn(100_000)}}, path)  # 400 kB
    except BaseException as error:  # the parent checks what it is
        result.put((type(error).__name__, str(error)))
    else:
        result.put(("", ""))


@pytest.mark.skipif(resource is None, reason="needs POSIX resource limits")
def test_a_full_disk_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "last.ckpt"
    fork = multiprocessing.get_context("fork")
    result = fork.Queue()
    child = fork.Process(target=_save_on_a_full_disk, args=(path, result))
    child.start()
    name, message = result.get(timeout=60)
    child.join()
    # torch.save reports the failed write as RuntimeError("[enforce fail at inline_container.cc:...] unexpected pos").
    assert name == "CheckpointWriteError", (name, message)
    assert message == f"cannot write checkpoint {path}: [Errno 27] File too large"
    assert not path.exists()
    assert list(path.parent.iterdir()) == []  # no temporary file left


class ReplaceCheckpointFolder(pl.Callback):
    """At ``step``, once the save in flight (if any) has committed, the run's checkpoint folder moves to
    ``checkpoints.saved`` and a file takes its place; ``steps`` keeps every global step a batch ended at."""

    steps: ClassVar[list[int]] = []

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        ReplaceCheckpointFolder.steps.append(trainer.global_step)
        if trainer.global_step == self.step:
            trainer.strategy.checkpoint_io.saves.wait()  # the step before's save is whole: it must stay so
            folder = Path(trainer.log_dir) / "checkpoints"
            shutil.move(folder, folder.with_name("checkpoints.saved"))
            folder.write_text("a file where the folder was")


@pytest.mark.parametrize("background", ["true", "false"])
def test_a_checkpoint_folder_that_becomes_unwritable_stops_the_run_with_one_line(
    cli: ModuleType, in_tmp: Path, background: str
) -> None:
    """The save of step 6 fails: in the loop (``background false``) or in its thread, raised as the next batch
    starts; either way the fit ends with one line, and step 4's ``last.ckpt`` is intact."""
    run_dir = in_tmp / "runs" / "fixture" / "broken"
    flags = [
        *run_dir_flags(run_dir),
        "--last_checkpoint.every_n_train_steps=2",
        f"--last_checkpoint.background={background}",
    ]
    ReplaceCheckpointFolder.steps = []
    with pytest.raises(SystemExit) as exit_info:
        cli.main(
            [
                "fit",
                *flags,
                "--trainer.callbacks+=test_bad_checkpoints.ReplaceCheckpointFolder",
                "--trainer.callbacks.step=5",
            ]
        )
    message = str(exit_info.value.code)  # printed by the interpreter, exit status 1
    assert message.startswith(f"error: cannot write checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}:"), message
    assert "Not a directory" in message or "File exists" in message
    assert "\n" not in message
    # In the loop, the save of step 6 fails at step 6; in the background, it is raised as the first batch after the
    # failure starts, and at the latest by the next save (step 8), which waits for it: never later.
    assert (
        max(ReplaceCheckpointFolder.steps) == 6
        if background == "false"
        else 6 <= max(ReplaceCheckpointFolder.steps) <= 8
    )
    saved = torch.load(run_dir / "checkpoints.saved" / "last.ckpt", weights_only=True)  # step 4: intact
    assert saved["global_step"] == 4


# --- export -----------------------------------------------------------------------------------------------------


TORCH_EXPORT = ["--ckpt_path=best", "--formats=[torch_export]"]
"""Without ONNX, whose refusal (the `export` extra not installed) would come first under ``[dev]`` alone."""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["schedule", "--height=-1"], "height must be >= 2, got -1"),
        (["schedule", "--points=0"], "points must be >= 2, got 0"),
        (["export", *TORCH_EXPORT, "--max_samples=1"], "max_samples must be >= 2"),
        (["export", *TORCH_EXPORT, "--atol=-1"], "atol must be >= 0, got -1"),
        (["export", *TORCH_EXPORT, "--output_dir=a_file"], "output_dir: a_file is a file, not a folder"),
    ],
)
def test_bad_arguments_of_the_kits_subcommands(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path, args: list[str], message: str
) -> None:
    Path("a_file").write_text("not a folder")
    before = files_in(trained)
    assert message in refused_cli(run_cli, capsys, *args, *run_dir_flags(trained))
    assert files_in(trained) == before


def test_export_needs_a_checkpoint(run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    assert "ckpt_path" in refused_cli(run_cli, capsys, "export", "--formats=[torch_export]")
    assert files_in(in_tmp) == []


def test_export_goes_to_the_checkpoints_run_and_never_overwrites_silently(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path, tmp_path: Path
) -> None:
    run = shutil.copytree(trained, tmp_path / "elsewhere" / "copy")
    args = ["export", "--formats=[torch_export]", f"--ckpt_path={run / 'checkpoints' / 'best.ckpt'}"]
    run_cli(*args)  # not in the config's run directory (runs/fixture): in the run that wrote the checkpoint
    assert (run / "export" / "model.pt2").is_file()
    assert not Path("runs").exists()
    (run / "export" / "model.onnx").write_bytes(b"an earlier ONNX export")
    before = digest(run)
    line = refused_cli(run_cli, capsys, *args[:-1], f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    assert f"output_dir: {run / 'export'} already holds model.onnx, model.pt2 from an earlier export" in line
    assert digest(run) == before
    # The whole earlier export is replaced: no model.onnx of other weights beside the new model.pt2.
    run_cli(*args[:-1], f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}", "--overwrite=true")
    assert sorted(path.name for path in (run / "export").iterdir()) == ["model.pt2"]
    assert sorted(path.name for path in run.iterdir() if path.name.startswith(".")) == []  # no temporary folders
    # Files no export writes are never deleted by --overwrite.
    (run / "export" / "notes.txt").write_text("mine")
    before = digest(run)
    line = refused_cli(run_cli, capsys, *args, "--overwrite=true")
    assert line == (
        f"error: output_dir: {run / 'export'} holds notes.txt, which no export writes: --overwrite true replaces"
        " the whole folder; choose another --output_dir"
    )
    assert digest(run) == before


def test_export_to_a_folder_that_cannot_be_written_is_one_line_naming_output_dir(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path, tmp_path: Path
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    args = ["export", "--formats=[torch_export]", f"--ckpt_path={trained / 'checkpoints' / 'best.ckpt'}"]
    with read_only(locked):
        line = refused_cli(run_cli, capsys, *args, f"--output_dir={locked / 'export'}")
    assert line == f"error: output_dir: cannot write in {locked} (permission denied)"
    assert list(locked.iterdir()) == []


class NoPredictLoader(fixture_task.SequenceData):
    """The fixture's data without a predict loader."""

    predict_dataloader = pl.LightningDataModule.predict_dataloader


class WithExampleInput(fixture_task.SequenceRegressor):
    """The fixture's model with Lightning's ``example_input_array``: export can trace it without a predict loader."""

    @property
    def example_input_array(self) -> Tensor:
        return torch.zeros(4, *self.hparams.input_shape)


def test_export_traces_the_example_input_without_a_predict_loader(run_cli: RunCli, trained: Path, in_tmp: Path) -> None:
    checkpoint = torch.load(trained / "checkpoints" / "best.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["_class_path"] = (
        "test_bad_checkpoints.WithExampleInput"  # LightningCLI builds this class
    )
    torch.save(checkpoint, "best.ckpt")
    args = [
        "--data=test_bad_checkpoints.NoPredictLoader",
        "--formats=[torch_export]",
        "--output_dir=out",
        "--ckpt_path=best.ckpt",
    ]
    run_cli("export", *args)
    assert (in_tmp / "out" / "model.pt2").is_file()
