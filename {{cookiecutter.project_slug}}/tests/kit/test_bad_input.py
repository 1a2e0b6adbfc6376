"""Bad input on the fixture task: one ``error:`` line naming the key (or file, or class), exit 2, nothing written.

Also what must not be refused: two runs saving into one checkpoint folder, a checkpoint in torch's legacy format.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import fixture_task
import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from support import run_dir_flags, submodule
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

checkpoint_io = submodule("kit.checkpoint_io")

RunCli = Callable[..., object]


def refused(run_cli: RunCli, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Runs a command that must be refused: exit 2 and exactly one ``error:`` line, which is returned."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert err.strip().splitlines()[-1] == errors[0], err  # nothing after it: one line
    assert "Traceback" not in err
    return errors[0]


def files_in(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.fixture(scope="module")
def trained(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the fixture task (one epoch); tests read its checkpoints."""
    run_dir = tmp_path_factory.mktemp("trained") / "runs" / "fixture" / "trained"
    cli.build_cli(["fit", *run_dir_flags(run_dir), "--trainer.max_epochs=1"])
    return run_dir


# --- values the configured classes refuse, early or late --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # Refused by torch's DataLoader in the fixture's train_dataloader, inside `fit`, after Lightning opened the
        # event file and saved the config: both are taken back.
        (["--data.init_args.batch_size=0"], ["data: SequenceData.train_dataloader (fixture_task.py:", "batch_size=0"]),
        (["--data.init_args.batch_size=-1"], ["data: SequenceData.train_dataloader", "batch_size=-1"]),
        (["--data.init_args.num_workers=-1"], ["data: SequenceData.train_dataloader", "num_workers"]),
        (["--data.init_args.train_size=0"], ["data: SequenceData.train_dataloader", "num_samples=0"]),
        # Refused by torch's AdamW in the fixture's configure_optimizers, inside `fit`.
        (["--model.init_args.lr=-1"], ["model: SequenceRegressor.configure_optimizers", "Invalid learning rate: -1.0"]),
        # Refused while the model is built (jsonargparse wraps the error in a dump of the whole config).
        (["--model.init_args.hidden=-3"], ["model: SequenceRegressor (fixture_task.py:", "negative dimension -3"]),
        (["--last_checkpoint.every_n_train_steps=0"], ["last_checkpoint: LastCheckpoint", ">= 1 or null, got 0"]),
        # Refused by the Trainer's constructor.
        (["--trainer.max_epochs=-5"], ["trainer: `max_epochs` must be a non-negative integer or -1"]),
        (["--trainer.devices=0"], ["trainer: `Trainer(devices="]),
        (["--trainer.accelerator=tpu"], ["trainer: Requirement 'torch_xla"]),  # a package the choice needs
        # Accepted by Lightning, then a ZeroDivisionError (or silently ignored): refused by the kit's checks.
        (["--trainer.accumulate_grad_batches=0"], ["trainer.accumulate_grad_batches must be >= 1, got 0"]),
        (["--trainer.gradient_clip_val=-1"], ["trainer.gradient_clip_val must be >= 0 (0 or null: no clipping)"]),
        (["--trainer.check_val_every_n_epoch=0"], ["trainer.check_val_every_n_epoch must be >= 1 or null, got 0"]),
        (["--trainer.val_check_interval=0"], ["trainer.val_check_interval must be > 0, got 0"]),
        (["--trainer.num_sanity_val_steps=-5"], ["trainer.num_sanity_val_steps must be >= -1, got -5"]),
        (["--seed_everything=-1"], ["seed_everything must be in [0, 4294967295]"]),  # Lightning: a traceback
        (["--best_checkpoint.monitor="], ["best_checkpoint: BestCheckpoint (", "monitor must name a logged metric"]),
        # The monitored metric: never logged, or logged on an empty validation set.
        (
            ["--best_checkpoint.monitor=val/acc"],
            ["SequenceRegressor never logs 'val/acc'; its validation logs val/loss"],
        ),
        (["--data.init_args.val_size=0"], ["'val/loss' is a validation metric, but SequenceData.val_dataloader()"]),
        (
            ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=val/nope"],
            ["trainer.callbacks: EarlyStopping.monitor: SequenceRegressor never logs 'val/nope'"],
        ),
    ],
)
def test_a_refused_value_names_its_key_and_writes_nothing(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, args: list[str], expected: list[str]
) -> None:
    line = refused(run_cli, capsys, "fit", *args)
    assert all(part in line for part in expected), line
    assert files_in(in_tmp) == []  # no run directory, config or events


def test_in_a_process_a_refused_value_exits_2_with_one_line(
    run_process: Callable[..., subprocess.CompletedProcess[str]], in_tmp: Path
) -> None:
    # The exit-code contract of `main`: 2 for bad input, and the error line is the last thing printed.
    process = run_process("fit", "--data.init_args.batch_size=0")
    assert process.returncode == 2, process.stdout[-3000:]
    assert process.stdout.strip().splitlines()[-1].startswith("error: data: SequenceData.train_dataloader")
    assert "Traceback" not in process.stdout
    assert files_in(in_tmp) == ["out.log"]


def test_negative_clip_value_is_not_silently_ignored(run_cli: RunCli, capsys: pytest.CaptureFixture[str]) -> None:
    # Lightning skips clipping for any value <= 0: the run trained exactly as the unclipped one.
    for algorithm in ("norm", "value"):
        line = refused(
            run_cli, capsys, "fit", "--trainer.gradient_clip_val=-1", f"--trainer.gradient_clip_algorithm={algorithm}"
        )
        assert "got -1" in line


def test_more_cpu_processes_than_cores_are_refused(run_cli: RunCli, capsys: pytest.CaptureFixture[str]) -> None:
    cores = len(os.sched_getaffinity(0))
    line = refused(run_cli, capsys, "fit", "--trainer.strategy=ddp", f"--trainer.devices={cores + 1}")
    assert f"trainer.devices: {cores + 1} processes on this machine's {cores} CPU cores" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--trainer.default_root_dir=a_file/runs"],
            "trainer.default_root_dir: cannot create a_file/runs: a_file is a file",
        ),
        (["--trainer.default_root_dir=a_file"], "trainer.default_root_dir: a_file is a file, not a folder"),
        (
            ["--trainer.logger=TensorBoardLogger", "--trainer.logger.init_args.save_dir=a_file/logs"],
            "run directory: cannot create a_file/logs",
        ),
    ],
)
def test_a_save_folder_that_cannot_be_made_is_named_before_training(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, args: list[str], message: str
) -> None:
    # Tests run as root, whom a read-only folder does not stop: a path under a regular file stands for any
    # folder that cannot be created.
    Path("a_file").write_text("not a folder")
    assert message in refused(run_cli, capsys, "fit", *args)
    assert files_in(in_tmp) == ["a_file"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed_everything=abc"], "error: seed_everything: expected bool or int; got 'abc'"),
        (["--trainer.precision=17"], "error: trainer.precision: expected one of 64, 32, 16, 'transformer-engine'"),
        (["--best_checkpoint.mode=up"], "error: best_checkpoint.mode: Expected a typing.Literal['min', 'max']"),
        (["--model.init_args.optimizer=adam"], "optimizer: Expected a typing.Literal['adamw', 'sgd']. Got value: adam"),
        (
            ["--model.class_path=torch.nn.Linear"],
            "error: model: Import path torch.nn.Linear does not correspond to a subclass of LightningModule",
        ),
        (["--data.class_path=nowhere.Data"], "error: data: Problem with given class_path 'nowhere.Data': No module"),
        (["--trainer.callbacks+=NoSuchCallback"], "error: trainer.callbacks: Expected a path but NoSuchCallback"),
    ],
)
def test_a_type_error_is_one_line_without_the_usage(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    # jsonargparse prints ~60 lines of usage, then a multi-line error ending in a dump of the given value.
    assert message in refused(run_cli, capsys, "fit", *args)


# --- a task that lacks what a subcommand needs ------------------------------------------------------------------


class Bare(pl.LightningModule):
    """A network and nothing else: no training_step, no configure_optimizers."""

    def __init__(self, input_shape: tuple[int, ...] = (16,)) -> None:
        super().__init__()
        self.net = nn.Linear(input_shape[0], 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class StepOnly(Bare):
    """A training step, but no optimizer."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return F.mse_loss(self(batch[0]), batch[1])


class ConstantRate(StepOnly):
    """Plain SGD at a constant rate: nothing asks for the number of steps before training starts."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class NoLoaders(pl.LightningDataModule):
    """Knows its shape, provides no loader."""

    input_shape = (16,)


class TrainOnly(pl.LightningDataModule):
    """32 training sequences and no validation set."""

    input_shape = (16,)

    def __init__(self, batch_size: int = 8, drop_last: bool = False) -> None:
        super().__init__()
        self.batch_size, self.drop_last = batch_size, drop_last

    def train_dataloader(self) -> DataLoader:
        data = TensorDataset(torch.randn(32, 16), torch.randn(32, 1))
        return DataLoader(data, batch_size=self.batch_size, drop_last=self.drop_last)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "--model=test_bad_input.Bare"], "model: Bare has no training_step(), which `fit` needs"),
        (
            ["fit", "--model=test_bad_input.StepOnly"],
            "model: StepOnly has no configure_optimizers(), which `fit` needs",
        ),
        (["fit", "--data=test_bad_input.NoLoaders"], "data: NoLoaders has no train_dataloader(), which `fit` needs"),
        (["validate", "--data=test_bad_input.TrainOnly"], "data: TrainOnly has no val_dataloader(), which `validate`"),
        (["test", "--model=test_bad_input.StepOnly"], "model: StepOnly has no test_step(), which `test` needs"),
        (
            ["predict", "--data=test_bad_input.NoLoaders"],
            "data: NoLoaders has no predict_dataloader(), which `predict`",
        ),
        (
            ["export", "--data=test_bad_input.NoLoaders", "--ckpt_path=best"],
            "data: NoLoaders has no predict_dataloader() and model: SequenceRegressor no example_input_array",
        ),
        (
            ["fit", "--data=test_bad_input.TrainOnly"],  # fixture.yaml monitors val/loss
            "best_checkpoint.monitor: 'val/loss' is a validation metric, but TrainOnly has no val_dataloader()",
        ),
        (
            [
                "fit",
                "--model=test_bad_input.ConstantRate",
                "--data=test_bad_input.TrainOnly",
                "--data.init_args.batch_size=64",  # more than the 32 samples, and the short batch dropped
                "--data.init_args.drop_last=true",
            ],
            "data: TrainOnly.train_dataloader() yields no batch",
        ),
    ],
)
def test_a_task_missing_what_the_subcommand_needs_is_named(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, args: list[str], message: str
) -> None:
    flags = ["--best_checkpoint.monitor=train/loss"] if "drop_last" in str(args) else []
    assert message in refused(run_cli, capsys, *args, *flags)
    assert files_in(in_tmp) == []


# --- config files -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "config bad.yaml is empty"),
        ("# only a comment\n", "config bad.yaml is empty"),
        ("trainer:\n  max_epochs: [1\n", "config bad.yaml, line 3, column 1: expected ',' or ']'"),
        ("trainer:\n\tmax_epochs: 2\n", "config bad.yaml, line 2, column 1: found character '\\t'"),
        ("- trainer\n- model\n", "config bad.yaml holds a list, not a mapping of keys"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "config bad.yaml is not a text file"),
    ],
    ids=["empty", "comment-only", "unclosed-bracket", "tab", "list", "binary"],
)
def test_a_bad_config_file_is_named_with_the_line(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], content: str | bytes, message: str
) -> None:
    path = Path("bad.yaml")
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    assert message in refused(run_cli, capsys, "fit", "--config=bad.yaml")


def test_a_folder_given_as_config_is_named(run_cli: RunCli, capsys: pytest.CaptureFixture[str]) -> None:
    Path("configs").mkdir()
    assert "Path is not a file" in refused(run_cli, capsys, "fit", "--config=configs")


def test_a_broken_default_config_is_named(
    cli: ModuleType, run_cli: RunCli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    Path("default.yaml").write_text("trainer:\n  max_epochs: 2\n model: x\n")
    monkeypatch.setenv(cli.DEFAULT_CONFIG_ENV, "default.yaml")
    assert "config default.yaml, line 3, column" in refused(run_cli, capsys, "fit")


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
    line = refused(run_cli, capsys, "validate", f"--ckpt_path={bad}")
    assert f"checkpoint bad.ckpt {message}" in line
    assert "\x1b" not in line  # torch's message carries terminal colour codes


def test_a_checkpoint_of_another_architecture_names_the_keys_and_shapes(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path
) -> None:
    # `best` by name: given a file, LightningCLI would rebuild the model from the hyperparameters inside it.
    line = refused(
        run_cli, capsys, "validate", *run_dir_flags(trained), "--model.init_args.hidden=8", "--ckpt_path=best"
    )
    assert "than the configured fixture_task.SequenceRegressor (the same class with other arguments)" in line
    assert (
        "other shape (3): net.0.weight 32x16 vs 8x16, net.0.bias 32 vs 8, net.3.weight 1x32 vs 1x8 (checkpoint vs"
        in line
    )
    line = refused(
        run_cli, capsys, "validate", *run_dir_flags(trained), "--model=fixture_task.LinearRegressor", "--ckpt_path=best"
    )
    assert "than the configured fixture_task.LinearRegressor (by fixture_task.SequenceRegressor)" in line
    assert (
        "missing (2): net.1.bias, net.1.weight; unexpected (4): net.0.bias, net.0.weight, net.3.bias, net.3.weight"
        in line
    )


class ReplaceCheckpointFolder(pl.Callback):
    """At ``step``, the run's checkpoint folder moves to ``checkpoints.saved`` and a file takes its place."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step == self.step:
            folder = Path(trainer.log_dir) / "checkpoints"
            shutil.move(folder, folder.with_name("checkpoints.saved"))
            folder.write_text("a file where the folder was")


def test_a_checkpoint_folder_that_becomes_unwritable_stops_the_run_with_one_line(cli: ModuleType, in_tmp: Path) -> None:
    run_dir = in_tmp / "runs" / "fixture" / "broken"
    flags = [*run_dir_flags(run_dir), "--last_checkpoint.every_n_train_steps=4"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(
            ["fit", *flags, "--trainer.callbacks+=test_bad_input.ReplaceCheckpointFolder", "--trainer.callbacks.step=5"]
        )
    message = str(exit_info.value.code)  # printed by the interpreter, exit status 1
    assert message.startswith(f"error: cannot write checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}:"), message
    assert "Not a directory" in message or "File exists" in message
    saved = torch.load(run_dir / "checkpoints.saved" / "last.ckpt", weights_only=True)  # step 4: intact
    assert saved["global_step"] == 4


# --- export -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["schedule", "--height=-1"], "height must be >= 2, got -1"),
        (["schedule", "--points=0"], "points must be >= 2, got 0"),
        (["export", "--ckpt_path=best", "--max_samples=1"], "max_samples must be >= 2"),
        (["export", "--ckpt_path=best", "--atol=-1"], "atol must be >= 0, got -1"),
        (["export", "--ckpt_path=best", "--output_dir=a_file"], "output_dir: a_file is a file, not a folder"),
    ],
)
def test_bad_arguments_of_the_kits_subcommands(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path, args: list[str], message: str
) -> None:
    Path("a_file").write_text("not a folder")
    before = files_in(trained)
    assert message in refused(run_cli, capsys, *args, *run_dir_flags(trained))
    assert files_in(trained) == before


def test_export_needs_a_checkpoint(run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    assert "ckpt_path" in refused(run_cli, capsys, "export", "--formats=[torch_export]")
    assert files_in(in_tmp) == []


def test_export_goes_to_the_checkpoints_run_and_never_overwrites_silently(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], trained: Path, tmp_path: Path
) -> None:
    run = shutil.copytree(trained, tmp_path / "elsewhere" / "copy")
    args = ["export", "--formats=[torch_export]", f"--ckpt_path={run / 'checkpoints' / 'best.ckpt'}"]
    run_cli(*args)  # not in the config's run directory (runs/fixture): in the run that wrote the checkpoint
    exported = run / "export" / "model.pt2"
    written = exported.read_bytes()
    assert not Path("runs").exists()
    line = refused(run_cli, capsys, *args[:-1], f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    assert f"output_dir: {run / 'export'} already holds model.pt2 from an earlier export" in line
    assert exported.read_bytes() == written
    run_cli(*args, "--overwrite=true")
    assert exported.is_file()


class WithExampleInput(fixture_task.SequenceRegressor):
    """The fixture's model with Lightning's ``example_input_array``: export can trace it without a predict loader."""

    @property
    def example_input_array(self) -> Tensor:
        return torch.zeros(4, *self.hparams.input_shape)


def test_export_traces_the_example_input_without_a_predict_loader(run_cli: RunCli, trained: Path, in_tmp: Path) -> None:
    checkpoint = torch.load(trained / "checkpoints" / "best.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["_class_path"] = "test_bad_input.WithExampleInput"  # LightningCLI builds this class
    torch.save(checkpoint, "best.ckpt")
    args = ["--data=test_bad_input.TrainOnly", "--formats=[torch_export]", "--output_dir=out", "--ckpt_path=best.ckpt"]
    run_cli("export", *args)
    assert (in_tmp / "out" / "model.pt2").is_file()
