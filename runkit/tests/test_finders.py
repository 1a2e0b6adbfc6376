"""``lr_find`` and ``batch_size_find``: Lightning's finders on the configured run, each answer a preset that stacks."""

from __future__ import annotations

import importlib.util
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import fixture_task
import pytest
import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch.tuner.lr_finder import _LRFinder
from support import TESTS, submodule

from runkit.testing.support import refused, run_dir_flags

finders = submodule("tools.finders")
finder_presets = submodule("tools.finder_presets")
finder_plots = submodule("tools.finder_plots")
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def preset_value(path: Path) -> object:
    """The one leaf of a finder's preset."""
    tree = yaml.safe_load(path.read_text())
    while isinstance(tree, dict):
        ((_, tree),) = tree.items()
    return tree


@pytest.mark.parametrize(
    "matplotlib",
    [
        pytest.param(True, marks=pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed")),
        False,
    ],
    ids=["with-matplotlib", "without-matplotlib"],
)
def test_lr_find_writes_a_preset_that_fit_stacks(
    cli: ModuleType,
    run_cli: Callable[..., object],
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    matplotlib: bool,
) -> None:
    if not matplotlib:
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib...` raises ImportError
        monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    run = in_tmp / "runs/fixture/lr"
    # 40 steps across 16-batch epochs of a 2-epoch run: the test takes its own length, not the run's.
    run_cli("lr_find", "--num_training=40", "--max_lr=0.01", *run_dir_flags(run))
    out = capsys.readouterr().out
    assert "40 of 40 steps" in out
    value = preset_value(run / "lr_find.yaml")
    assert isinstance(value, float)
    assert 1e-8 <= value <= 0.01
    assert f"suggested model.init_args.lr: {value:g} (configured: 0.01)" in out
    assert (run / "lr_find.png").is_file() == matplotlib
    assert ("install matplotlib" in out) != matplotlib
    # The preset stacks: the model the next command builds trains with the suggestion.
    built = cli.build_cli([f"--config={run / 'lr_find.yaml'}"], run=False)
    assert built.model.hparams.lr == value


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--lr_key=model.init_args.learning_rate",
            "--lr_key model.init_args.learning_rate: the config holds no number",
        ),
        ("--trainer.fast_dev_run=true", "the finders do not run with trainer.fast_dev_run"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(
    run_cli: Callable[..., object], in_tmp: Path, capsys: pytest.CaptureFixture[str], flag: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli("lr_find", flag)
    assert exit_info.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err
    assert list(in_tmp.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Were: "no suggestion (too few finite losses): raise --num_training", a ZeroDivisionError, an error about
        # the model's schedule.
        (["--min_lr=1", "--max_lr=0.001"], "max_lr (0.001) must be above min_lr (1): swap them"),
        (["--min_lr=0"], "min_lr must be > 0, got 0: e.g. --min_lr 1e-8"),
        (["--min_lr=-1"], "min_lr must be > 0, got -1: e.g. --min_lr 1e-8"),
        (
            ["--num_training=0"],
            "num_training must be >= 13 (the suggestion skips the first 10 steps and the last), got 0: e.g. 100",
        ),
    ],
)
def test_bad_bounds_of_the_lr_range_test_exit_2_before_it_runs(
    run_cli: Callable[..., object], in_tmp: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert refused(capsys, lambda: run_cli("lr_find", *args)) == f"error: {message}"
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("finder", "args"),
    [("lr_find", ["--num_training=20"]), ("batch_size_find", ["--data.init_args.train_size=16", "--max_trials=2"])],
)
def test_an_existing_preset_is_replaced_only_with_overwrite(
    run_cli: Callable[..., object], in_tmp: Path, capsys: pytest.CaptureFixture[str], finder: str, args: list[str]
) -> None:
    preset = Path("configs/mine.yaml")
    preset.parent.mkdir()
    preset.write_text("model:\n  init_args:\n    lr: 0.5\n")
    before = preset.read_bytes()
    line = refused(capsys, lambda: run_cli(finder, *args, f"--output={preset}"))
    assert line == f"error: output: {preset} exists: pass --overwrite true to replace it, or another --output"
    assert preset.read_bytes() == before
    assert sorted(str(path) for path in in_tmp.rglob("*")) == [str(in_tmp / "configs"), str(in_tmp / preset)]
    run_cli(finder, *args, f"--output={preset}", "--overwrite=true")
    assert isinstance(preset_value(preset), (int, float))
    assert preset.read_bytes() != before


class SignalDuringTheTest(fixture_task.SequenceRegressor):
    """The fixture's model, which sends this process SIGTERM in its 6th training step."""

    steps = 0

    def training_step(self, batch: object, batch_idx: int) -> object:
        self.steps += 1
        if self.steps == 6:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize(
    ("finder", "args"),
    [
        ("lr_find", ["--num_training=40", "--model=test_finders.SignalDuringTheTest"]),
        ("batch_size_find", ["--steps_per_trial=3", "--max_trials=4", "--model=test_finders.SignalDuringTheTest"]),
    ],
    ids=["lr_find", "batch_size_find"],
)
def test_sigterm_during_a_finder_exits_143_and_leaves_nothing(
    run_cli: Callable[..., object], in_tmp: Path, capfd: pytest.CaptureFixture[str], finder: str, args: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_cli(finder, *args)
    assert exit_info.value.code == 143
    err = capfd.readouterr().err  # the signal handler writes to the file descriptor
    assert "SIGTERM: stopping at the next safe point" in err
    # Lightning's tuners save the model to a hidden `.lr_find_<uuid>.ckpt` (`.scale_batch_size_<uuid>.ckpt`).
    assert [str(path.relative_to(in_tmp)) for path in in_tmp.rglob("*") if path.is_file()] == []


def test_the_lr_key_is_found_in_the_config_or_must_be_named() -> None:
    optimizer = Namespace(class_path="torch.optim.SGD", init_args=Namespace(lr=0.1, momentum=0.9))
    config = Namespace(model=Namespace(init_args=Namespace(optimizer=optimizer, hidden=8)), data=Namespace(lr=1.0))

    def key(named: str | None, names: tuple[str, ...] = finders.LR_NAMES) -> str:
        return finder_presets.config_key(config, named, ("model", "optimizer"), names, "lr_key")

    assert key(None) == "model.init_args.optimizer.init_args.lr"  # `data.lr` is not under `model`
    assert key("model.init_args.hidden") == "model.init_args.hidden"
    config.model.init_args.learning_rate = 0.5  # two candidates: the user names one
    with pytest.raises(ValueError, match=r"found model\.init_args\.optimizer\.init_args\.lr, model\.init_args\.learn"):
        key(None)
    with pytest.raises(ValueError, match="none is named batch_size"):
        key(None, finders.BATCH_SIZE_NAMES)
    # A module without configure_optimizers: the LR is the top-level `--optimizer`'s.
    top_level = Namespace(class_path="torch.optim.Adam", init_args=Namespace(lr=0.01))
    config = Namespace(model=Namespace(init_args=Namespace(hidden=8)), optimizer=top_level)
    assert key(None) == "optimizer.init_args.lr"


def test_the_finders_on_a_module_that_brings_its_own_loaders(
    cli: ModuleType, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "foreign.yaml"))
    own = ["--model=foreign.BringsItsOwn", "--data=null", "--optimizer=torch.optim.Adam", "--optimizer.lr=0.01"]
    line = refused(capsys, lambda: cli.main(["batch_size_find", *own]))
    assert line == "error: batch_size_find scales a datamodule's batch size, and this command has none (--data null)"
    cli.main(["lr_find", *own, "--num_training=16"])
    preset = yaml.safe_load(next(Path("runs").rglob("lr_find.yaml")).read_text())
    assert set(preset) == {"optimizer"}  # the top-level optimizer's LR: what the module is built with


def test_batch_size_find_writes_a_preset_and_says_a_cpu_only_bounds_memory(
    cli: ModuleType, run_cli: Callable[..., object], in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = in_tmp / "runs/fixture/bs"
    run_cli("batch_size_find", "--data.init_args.train_size=64", *run_dir_flags(run))
    out = capsys.readouterr().out
    # Doubling from 2 on a CPU never runs out of memory: the search ends at the training set's size.
    assert "batch size scaling (power) from 2: 64" in out
    assert "on CPU this only bounds memory" in out
    assert preset_value(run / "batch_size_find.yaml") == 64
    built = cli.build_cli([f"--config={run / 'batch_size_find.yaml'}"], run=False)
    assert built.datamodule.batch_size == 64


def test_the_suggestion_is_the_steepest_descent_against_log_lr() -> None:
    # A range test's typical curve: a plateau with small wiggles, a steep descent around 1e-2, divergence.
    lrs = torch.logspace(-8, 0, 100, dtype=torch.float64)
    x = lrs.log10()
    losses = 2.3 - 1.5 * torch.sigmoid(3 * (x + 2)) + 3 * torch.relu(x + 0.5) + 0.002 * torch.sin(7 * x)
    best = finders.steepest_descent(lrs.tolist(), losses.tolist(), log_x=True)
    assert 10**-2.5 < lrs[best] < 10**-1.5
    # Lightning 2.6 differentiates against the LR itself and picks a wiggle of the plateau (lightning#21141):
    # when this fails, Lightning's own suggestion is right again and `steepest_descent` can go.
    lightning = _LRFinder("exponential", 1e-8, 1.0, 100)
    lightning.results = {"lr": lrs.tolist(), "loss": losses.tolist()}
    assert lightning.suggestion() < 1e-6
    assert finders.steepest_descent(lrs.tolist(), [math.nan] * 100, log_x=True) is None


def test_text_plot_marks_the_suggestion() -> None:
    lrs = [10.0**e for e in range(-6, 1)]
    losses = [1.0, 0.9, 0.5, 0.2, 0.3, float("nan"), 2.0]  # non-finite losses are left out
    plot = finder_plots.text_plot(lrs, losses, marked=3, width=7, height=5).splitlines()
    assert plot[0] == "        2 |      *"
    assert plot[4] == "      0.2 |   o*  "  # 0.3 rounds to the bottom row too
    assert plot[-1].split() == ["lr", "1.0e-06", "1.0e+00"]
