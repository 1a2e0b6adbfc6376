"""Bad input on the fixture task: one ``error:`` line naming the key (or file, or class), exit 2, nothing written.

Values, config files and a task missing what a command needs; checkpoints and export: test_bad_checkpoints.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
import yaml
from support import PACKAGE, submodule
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

import runkit
from runkit.testing.faults import fault
from runkit.testing.support import launch, refused, run_dir_flags

RunCli = Callable[..., object]


def refused_cli(run_cli: RunCli, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one ``error:`` line of a command that must exit 2."""
    return refused(capsys, lambda: run_cli(*args))


def files_in(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


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
        # The task's schedule failed on the -1 total steps, and blamed max_steps/max_epochs (the example's).
        (["--trainer.limit_train_batches=0"], ["trainer.limit_train_batches: 0 trains on no batch: `fit` needs"]),
        (["--trainer.limit_train_batches=0.0"], ["trainer.limit_train_batches: 0.0 trains on no batch"]),
        (["--seed_everything=-1"], ["seed_everything must be in [0, 4294967295]"]),  # Lightning: a traceback
        # Lightning logged every step (step % -1 == 0).
        (["--trainer.log_every_n_steps=-1"], ["trainer.log_every_n_steps must be >= 0 (0: no step logged), got -1"]),
        (["--best_checkpoint.monitor="], ["best_checkpoint: BestCheckpoint (", "monitor must name a logged metric"]),
        # What "best" means: the monitor's name says it; a mode that contradicts it, or none where it says neither.
        (
            ["--best_checkpoint.monitor=val/loss", "--best_checkpoint.mode=max"],
            [
                "best_checkpoint: BestCheckpoint (",
                "mode max contradicts monitor 'val/loss'",
                "--best_checkpoint.mode null",
            ],
        ),
        (
            ["--best_checkpoint.monitor=val/kappa"],
            [
                "best_checkpoint: BestCheckpoint (",
                "'val/kappa': its name does not say",
                "--best_checkpoint.mode min or",
            ],
        ),
        (
            ["--best_checkpoint.monitor=null", "--best_checkpoint.mode=max"],
            ["best_checkpoint: BestCheckpoint (", "mode max with monitor null: best.ckpt then follows the validation"],
        ),
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
    line = refused_cli(run_cli, capsys, "fit", *args)
    assert all(part in line for part in expected), line
    assert files_in(in_tmp) == []  # no run directory, config or events


UNLOGGED = "error: best_checkpoint.monitor: SequenceRegressor never logs 'val/acc'; its validation logs val/loss"


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--trainer.num_sanity_val_steps=0"],
        ["--trainer.num_sanity_val_steps=0", "--trainer.check_val_every_n_epoch=2"],
    ],
    ids=["sanity-check", "no-sanity-check", "no-sanity-check-validating-every-2-epochs"],
)
def test_a_monitor_never_logged_is_refused_before_training_and_leaves_no_run(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, flags: list[str]
) -> None:
    # Without the sanity check it was caught at the first validation, after an epoch (or two) of training, and the
    # run's folder was left behind, its session failed.
    short = ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2", "--trainer.max_epochs=3", *flags]
    assert refused_cli(run_cli, capsys, "fit", *short, "--best_checkpoint.monitor=val/acc") == UNLOGGED
    assert files_in(in_tmp) == []
    fitted = run_cli("fit", *short)  # a metric it logs: the one-batch check for it leaves the run as configured
    assert fitted.trainer.global_step == 6  # type: ignore[attr-defined]
    assert fitted.trainer.num_sanity_val_steps == (0 if flags else 2)  # type: ignore[attr-defined]


def test_a_resume_monitoring_a_metric_never_logged_is_refused_before_it_trains(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Path("runs/fixture/unlogged")
    short = [*run_dir_flags(run), "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2"]
    every_step = "--last_checkpoint.every_n_train_steps=1"
    with pytest.raises(RuntimeError, match="injected crash"):  # after epoch 0 and a step of epoch 1
        run_cli("fit", *short, every_step, fault("RaiseAtStep", step=4))
    last = (run / "checkpoints" / "last.ckpt").read_bytes()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    # Lightning runs no sanity check on a mid-epoch resume: it was caught at the first validation, after training.
    args = [*short, every_step, "--ckpt_path=last", "--best_checkpoint.monitor=val/acc"]
    line = refused_cli(run_cli, capsys, "fit", *args)
    assert line == UNLOGGED
    assert (run / "checkpoints" / "last.ckpt").read_bytes() == last  # not a step trained
    session = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"][-1]
    assert session["status"] == "failed"  # the resumed session records the refusal
    assert session["error"] == line.replace("error: ", "BadInputError: ", 1)


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
        line = refused_cli(
            run_cli, capsys, "fit", "--trainer.gradient_clip_val=-1", f"--trainer.gradient_clip_algorithm={algorithm}"
        )
        assert "got -1" in line


def test_more_cpu_processes_than_cores_are_refused(run_cli: RunCli, capsys: pytest.CaptureFixture[str]) -> None:
    cores = len(os.sched_getaffinity(0))
    line = refused_cli(run_cli, capsys, "fit", "--trainer.strategy=ddp", f"--trainer.devices={cores + 1}")
    assert f"trainer.devices: {cores + 1} processes on this machine's {cores} CPU cores" in line


@pytest.mark.parametrize(
    ("subcommand", "hook"),
    # The fixture's predict_dataloader returns its val_dataloader(): the hook that made the loader is named.
    [("fit", "train_dataloader"), ("validate", "val_dataloader"), ("predict", "val_dataloader")],
)
def test_more_loader_workers_than_the_machine_can_run_are_refused_before_any_starts(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, subcommand: str, hook: str
) -> None:
    # num_workers 1000 on 2 cores started 1000 processes, each with a copy of the dataset: no step in 300 s.
    cores = len(os.sched_getaffinity(0))
    bound = max(32, 4 * cores)
    line = refused_cli(run_cli, capsys, subcommand, f"--data.init_args.num_workers={bound + 1}")
    assert line.startswith(f"error: data: SequenceData.{hook}() gives a DataLoader num_workers={bound + 1}:"), line
    assert f"more than {bound} (4 per usable CPU core, {cores} here, and at least 32)" in line
    assert files_in(in_tmp) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--trainer.default_root_dir=a_file/runs"],
            "trainer.default_root_dir: cannot create a_file/runs: a_file is a file",
        ),
        (["--trainer.default_root_dir=a_file"], "trainer.default_root_dir: a_file is a file, not a folder"),
        # A logger's own save_dir no longer matters: every tracker writes into the run folder (kit/trackers/).
    ],
)
def test_a_save_folder_that_cannot_be_made_is_named_before_training(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, args: list[str], message: str
) -> None:
    # Tests run as root, whom a read-only folder does not stop: a path under a regular file stands for any
    # folder that cannot be created.
    Path("a_file").write_text("not a folder")
    assert message in refused_cli(run_cli, capsys, "fit", *args)
    assert files_in(in_tmp) == ["a_file"]


def test_a_read_only_file_system_is_named_as_one(in_tmp: Path) -> None:
    # EROFS was reported as "permission denied". A read-only mount in a mount namespace of the command's own.
    folder = in_tmp / "mounted"
    folder.mkdir()
    mount = ("unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"', str(folder))
    if shutil.which("unshare") is None or subprocess.run([*mount, "true"], check=False).returncode != 0:
        pytest.skip("no read-only mount here: unshare --mount needs root (CAP_SYS_ADMIN)")
    process = launch(PACKAGE, "fit", f"--trainer.default_root_dir={folder}/runs", cwd=in_tmp, wrapper=mount)
    assert process.returncode == 2, process.stdout[-3000:]
    last = process.stdout.strip().splitlines()[-1]
    assert last == f"error: trainer.default_root_dir: cannot write in {folder} (read-only file system)", last
    assert files_in(in_tmp) == ["mounted", "out.log"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed_everything=abc"], "error: seed_everything: expected bool or int; got 'abc'"),
        (  # what to write instead (it said only "got 'None'")
            ["--seed_everything=null"],
            "error: seed_everything: expected bool or int; got null: an int seeds every run alike, true draws a seed",
        ),
        (["--trainer.precision=17"], "error: trainer.precision: expected one of 64, 32, 16, 'transformer-engine'"),
        (
            ["--best_checkpoint.mode=up"],
            "error: best_checkpoint: Problem with given class_path 'runkit.BestCheckpoint': mode: expected"
            " one of 'min', 'max'; got 'up'",
        ),
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
    assert message in refused_cli(run_cli, capsys, "fit", *args)


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
        # Lightning predicted nothing and exited 0, without a line of the kit's.
        (
            ["predict", "--data.init_args.val_size=0"],
            "data: SequenceData.predict_dataloader() yields no batch: `predict` has nothing to predict",
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
    assert message in refused_cli(run_cli, capsys, *args, *flags)
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
        # PyYAML keeps the last of two equal keys silently: the first setting would be lost.
        (
            "trainer:\n  max_epochs: 2\n  devices: 1\n  max_epochs: 3\n",
            "config bad.yaml, line 4, column 3: duplicate key 'max_epochs' (first at line 2)",
        ),
        # A group of keys given something else: it was taken as the group's value, then an AttributeError.
        ("trainer: [1, 2]\n", "config bad.yaml: trainer must map its keys to values (accelerator, strategy, devices"),
        ("trainer: null\n", "config bad.yaml: trainer must map its keys to values (accelerator,"),
        ("last_checkpoint: 5\n", "config bad.yaml: last_checkpoint must map its keys to values ("),
        # A misspelled key whose value is {}: jsonargparse dropped it unread, so nothing said it was misspelled.
        ("modle: {}\n", "config bad.yaml: modle: no such key (did you mean 'model'?); its {} would have been ignored"),
        ("trainer:\n  callbakcs: {}\n", "config bad.yaml: trainer.callbakcs: no such key (did you mean 'callbacks'?)"),
        ("model:\n  init_args:\n    hiden: {}\n", "config bad.yaml: model.init_args.hiden: no such key (did you mean"),
    ],
    ids=[
        "empty",
        "comment-only",
        "unclosed-bracket",
        "tab",
        "list",
        "binary",
        "duplicate-key",
        "group-list",
        "group-null",
        "group-number",
        "empty-misspelled",
        "empty-misspelled-in-group",
        "empty-misspelled-argument",
    ],
)
def test_a_bad_config_file_is_named_with_the_line(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], content: str | bytes, message: str
) -> None:
    path = Path("bad.yaml")
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    assert message in refused_cli(run_cli, capsys, "fit", "--config=bad.yaml")


def test_a_folder_given_as_config_is_named(run_cli: RunCli, capsys: pytest.CaptureFixture[str]) -> None:
    Path("configs").mkdir()
    assert "Path is not a file" in refused_cli(run_cli, capsys, "fit", "--config=configs")


def test_a_broken_default_config_is_named(
    cli: ModuleType, run_cli: RunCli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    Path("default.yaml").write_text("trainer:\n  max_epochs: 2\n model: x\n")
    monkeypatch.setenv(submodule("project").DEFAULT_CONFIG_ENV, "default.yaml")
    assert "config default.yaml, line 3, column" in refused_cli(run_cli, capsys, "fit")


def test_a_yaml_alias_bomb_is_refused_before_it_expands(in_tmp: Path) -> None:
    # 8 levels of 10 aliases: ~600 bytes that expand to 10^8 values. jsonargparse copied them until the process ran out
    # of memory (a 112-line MemoryError); the process gets 3 GB of address space, so that a regression fails fast.
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 8)]
    Path("bomb.yaml").write_text("\n".join(["trainer:", "  max_epochs: 1", *levels]) + "\n")
    assert len(Path("bomb.yaml").read_bytes()) < 700
    done = launch(PACKAGE, "fit", "--config=bomb.yaml", cwd=in_tmp, wrapper=("prlimit", f"--as={3 * 2**30}"))
    assert done.returncode == 2, done.stdout
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stdout
    assert errors[0].startswith("error: config bomb.yaml: its YAML aliases (*name) expand it to 123,456,")
    assert errors[0].endswith("aliases may add 1,000,000 (an alias bomb?): refused before expanding them")
    assert "Traceback" not in done.stdout
    assert not Path("runs").exists()


class CachedSequences(pl.LightningDataModule):
    """A team's data module with a cache folder, as lightning-hydra-template's (``data_dir``): ``prepare_data`` writes
    the data there with the kit's ``atomic_save``, as the template's gratings task does."""

    input_shape = (16,)

    def __init__(self, data_dir: str = "data/", batch_size: int = 8) -> None:
        super().__init__()
        self.data_dir, self.batch_size = data_dir, batch_size

    def prepare_data(self) -> None:
        generator = torch.Generator().manual_seed(0)
        data = {"x": torch.randn(48, 16, generator=generator), "y": torch.randn(48, 1, generator=generator)}
        runkit.atomic_save(data, Path(self.data_dir) / "sequences.pt")

    def _loader(self, part: slice) -> DataLoader:
        data = torch.load(Path(self.data_dir) / "sequences.pt", weights_only=True)
        return DataLoader(TensorDataset(data["x"][part], data["y"][part]), batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._loader(slice(0, 32))

    def val_dataloader(self) -> DataLoader:
        return self._loader(slice(32, 48))


@pytest.mark.parametrize("data_dir", ["a_file", "a_file/cache"])
def test_a_data_folder_that_is_a_file_is_named_by_its_key_before_the_run_folder_is_made(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, data_dir: str
) -> None:
    # It said `cannot write checkpoint a_file/sequences.pt` after the run folder was made, and left it, failed.
    Path("a_file").write_text("not a folder")
    flags = ["--data=test_bad_input.CachedSequences", f"--data.init_args.data_dir={data_dir}", "--trainer.max_epochs=1"]
    line = refused_cli(run_cli, capsys, "fit", *flags)
    expected = "a_file is a file, not a folder" if data_dir == "a_file" else "cannot create a_file/cache: a_file is a"
    assert line.startswith(f"error: data.init_args.data_dir: {expected}"), line
    assert files_in(in_tmp) == ["a_file"]


def test_a_read_only_data_folder_is_named_by_its_key_and_leaves_no_run(in_tmp: Path) -> None:
    # A folder that exists is the module's to judge (data downloaded before may be read-only): its first write fails.
    folder = in_tmp / "mounted"
    folder.mkdir()
    mount = ("unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"', str(folder))
    if shutil.which("unshare") is None or subprocess.run([*mount, "true"], check=False).returncode != 0:
        pytest.skip("no read-only mount here: unshare --mount needs root (CAP_SYS_ADMIN)")
    flags = ["--data=test_bad_input.CachedSequences", f"--data.init_args.data_dir={folder}", "--trainer.max_epochs=1"]
    process = launch(PACKAGE, "fit", *flags, cwd=in_tmp, wrapper=mount)
    assert process.returncode == 2, process.stdout[-3000:]
    last = process.stdout.strip().splitlines()[-1]
    assert last.startswith("error: data.init_args.data_dir: CachedSequences.prepare_data (test_bad_input.py:"), last
    assert f"cannot write {folder}/sequences.pt" in last, last
    assert "Traceback" not in process.stdout
    assert files_in(in_tmp) == ["mounted", "out.log"]  # no run folder


def test_a_training_monitor_logged_per_step_and_per_epoch_is_followed_as_its_epoch_value(
    run_cli: RunCli, lightning_log: list[str]
) -> None:
    # The fixture logs train/loss with on_step and on_epoch (train/loss_step, train/loss_epoch): Lightning trained an
    # epoch, then failed, finding no `train/loss` to rank the checkpoint by.
    run = Path("runs/fixture/train-loss")
    flags = [*run_dir_flags(run), *("--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1")]
    flags += ["--trainer.max_epochs=2", "--best_checkpoint.monitor=train/loss"]
    with pytest.raises(SystemExit) as stopped:  # a SIGTERM in the second epoch: best.ckpt ranked the first
        run_cli("fit", *flags, fault("SignalAtStep", step=6, signum=15))
    assert stopped.value.code == 143
    said = [line for line in lightning_log if line.startswith("best_checkpoint.monitor:")]
    assert said == [
        "best_checkpoint.monitor: SequenceRegressor logs 'train/loss' per step and per epoch (train/loss_step,"
        " train/loss_epoch): best.ckpt follows train/loss_epoch"
    ]
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["BestCheckpoint"]
    assert state["monitor"] == "train/loss_epoch"
    assert (run / "checkpoints" / "best.ckpt").is_file()
    # Resumed with the same flag: the ranking carries on (it is the same metric), it does not start over.
    lightning_log.clear()
    resumed = run_cli("fit", *flags, "--ckpt_path=last")
    assert not any("ranking starts over" in line for line in lightning_log), lightning_log
    callback = resumed.trainer.checkpoint_callback  # type: ignore[attr-defined]
    assert callback.monitor == "train/loss_epoch"
    assert resumed.trainer.global_step == 8  # type: ignore[attr-defined]


def test_another_callback_monitoring_a_metric_logged_per_step_and_per_epoch_is_refused_at_the_first_batch(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=train/loss", "--trainer.max_epochs=1"]
    line = refused_cli(run_cli, capsys, "fit", *flags, "--trainer.limit_train_batches=4")
    assert line == (
        "error: trainer.callbacks: EarlyStopping.monitor: SequenceRegressor logs 'train/loss' per step and per epoch"
        " (train/loss_step, train/loss_epoch), never as 'train/loss': monitor train/loss_epoch"
    )
    # Refused once it trained: the run stays, its session ended and its lock given back (a resume is not refused).
    (run,) = Path("runs/fixture").iterdir()
    assert not (run / ".lock").exists()
    (session,) = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"]
    assert session["status"] != "running"
    assert "ended" in session


@pytest.mark.parametrize(
    ("flag", "base"),
    [
        ("--model=old_lightning.OldStyleRegressor", "LightningModule"),
        ("--model.class_path=old_lightning.OldStyleRegressor", "LightningModule"),
        ("--data=old_lightning.OldStyleData", "LightningDataModule"),
    ],
)
def test_a_class_of_the_pytorch_lightning_package_is_named_with_the_import_to_change(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], flag: str, base: str
) -> None:
    # jsonargparse said only `does not correspond to a subclass of LightningModule`.
    pytest.importorskip("pytorch_lightning", reason="a team's code on the pytorch_lightning package needs it")
    path = flag.partition("=")[2]
    key = flag.removeprefix("--").partition("=")[0].partition(".")[0]
    assert refused_cli(run_cli, capsys, "fit", flag) == (
        f"error: {key}: {path} subclasses pytorch_lightning's {base}; this project uses lightning.pytorch (the same"
        f" classes from the `lightning` package): in {Path(__file__).parent / 'old_lightning.py'}, import"
        f" `lightning.pytorch as pl` (or `from lightning.pytorch import {base}`) instead of `pytorch_lightning`"
    )


@pytest.mark.parametrize("subcommand", ["fit", "validate", "predict"])
def test_a_file_of_zeros_as_a_checkpoint_is_refused_without_torchs_advice_to_run_its_code(
    run_cli: RunCli, capsys: pytest.CaptureFixture[str], in_tmp: Path, subcommand: str
) -> None:
    # 20 GB of zeros (sparse: no disk used): torch's refusal advised re-running torch.load with weights_only=False,
    # which runs whatever code a file holds; that advice was passed on.
    with open("zeros.ckpt", "wb") as file:
        file.truncate(20 * 2**30)
    line = refused_cli(run_cli, capsys, subcommand, "--ckpt_path=zeros.ckpt")
    assert line.startswith("error: checkpoint zeros.ckpt is not readable (truncated or corrupt?)"), line
    assert "not a zip archive: a checkpoint of torch < 1.6, or no checkpoint at all" in line, line
    for advice in ("weights_only` set to `False`", "trusted source", "arbitrary code"):
        assert advice not in line, line
    assert files_in(in_tmp) == ["zeros.ckpt"]


def test_torchs_advice_to_turn_weights_only_off_is_never_passed_on() -> None:
    refused = (  # torch 2.6+'s text for an object weights_only refuses
        "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps only if"
        " you trust the source of the checkpoint. \n\t(1) In PyTorch 2.6, we changed the default value of the"
        " `weights_only` argument in `torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only`"
        " set to `False` will likely succeed, but it can result in arbitrary code execution. Do it only if you got the"
        " file from a trusted source.\n\t(2) Alternatively, to load with `weights_only=True` ..."
    )
    cleaned = submodule("foreign_messages").without_unsafe_advice(refused)
    assert "weights_only` set to `False`" not in cleaned
    assert "arbitrary code" not in cleaned
    assert cleaned.startswith("Weights only load failed.")
    assert cleaned.endswith("(2) Alternatively, to load with `weights_only=True` ...")
