"""The LR and batch-size finders: Lightning's Tuner on the configured run, its answer written as a preset.

``lr_find`` runs Lightning's LR range test (a short run whose LR grows every step) on the configured model,
optimizer and data; ``batch_size_find`` doubles the datamodule's batch size until a step runs out of memory.
Each writes its answer as a preset of one config key, which stacks like any other:
``fit -c <the same configs> -c <run directory>/lr_find.yaml``. The key is found in the command's config
(the one number under ``model`` named ``lr`` or ``learning_rate``; under ``data`` named ``batch_size``), or
named with ``--lr_key`` / ``--batch_size_key``.

Lightning's finder applies its suggestion to a model attribute (``lr`` or ``learning_rate``), which an
optimizer given as a CLI callable never reads (lightning#16787): here it only measures (``update_attr=False``)
and the suggestion goes to the config key that builds the optimizer. The suggestion is the steepest descent
of the loss against log10(LR), not against the LR as in Lightning 2.6 (lightning#21141, see ``steepest_descent``).
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import BatchSizeFinder
from lightning.pytorch.tuner import Tuner
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.parsing import lightning_hasattr
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..lightning_internals import request_stop
from ..lightning_internals.tools import end_fit_when_found, run_exactly
from ..project import current
from ..safety.signals import STOP, STOPS, exit_code
from ..store import location
from ..subcommands import CommandLine
from .finder_plots import save_lr_plot, text_plot
from .finder_presets import Found, command_config, key_or_exit, refuse_existing, run_again, write_preset

LR_NAMES = ("lr", "learning_rate")
MIN_STEPS = 13  # the suggestion skips the first 10 and the last step, and compares at least 2
BATCH_SIZE_NAMES = ("batch_size",)


def lr_find(
    trainer: pl.Trainer,
    model: pl.LightningModule,
    datamodule: pl.LightningDataModule | None = None,
    command: CommandLine | None = None,
    min_lr: float = 1e-8,
    max_lr: float = 1.0,
    num_training: int = 100,
    mode: Literal["exponential", "linear"] = "exponential",
    early_stop_threshold: float | None = 4.0,
    lr_key: str | None = None,
    output: str | None = None,
    overwrite: bool = False,
    width: int = 60,
    height: int = 12,
) -> Found:
    """Runs Lightning's LR range test on the configured run and writes the suggested LR as a preset.

    Prints the loss against the LR (the suggestion marked ``o``) and the suggestion; writes
    ``<run directory>/lr_find.yaml`` (stack it: ``fit -c <configs> -c <that file>``) and, with matplotlib
    installed, the plot next to it (``lr_find.png``). Nothing is trained: the model is restored after the test.
    A bad ``lr_key``, LR bounds or step count, or a preset that exists (without ``overwrite``) exits 2 before anything
    runs; a test with no suggestion (too few finite losses) exits 1; a stop signal during the test exits 128 + its
    number, with nothing written.

    Args:
        trainer: The command's Trainer.
        model: The model, with its optimizer, from the config.
        datamodule: The data the test trains on.
        command: The command line's parser and parsed config (given by the CLI, not a flag): the preset's key.
        min_lr: LR of the first step.
        max_lr: LR of the last step.
        num_training: Optimizer steps of the test, whatever the configured run's length.
        mode: How the LR grows from step to step.
        early_stop_threshold: Stop once the smoothed loss exceeds this multiple of its best; ``null``: never.
        lr_key: Config key the preset sets; ``null``: the one key under ``model`` named ``lr`` or
            ``learning_rate`` (e.g. ``model.init_args.optimizer.init_args.lr``).
        output: Path of the preset; ``null``: ``<run directory>/lr_find.yaml``.
        overwrite: Replace the preset (and its plot) if it exists; without it the command stops and keeps them.
        width: Columns of the plot.
        height: Rows of the plot.
    """
    parser, config = command_config(trainer, command)
    # Under the model, or the top-level `--optimizer` of a module without configure_optimizers.
    key = key_or_exit(parser, config, lr_key, ("model", "optimizer"), LR_NAMES, "lr_key")
    if not min_lr > 0:  # the exponential mode divides by it; a negative LR is no LR
        parser.error(f"min_lr must be > 0, got {min_lr:g}: e.g. --min_lr 1e-8")
    if not max_lr > min_lr:
        parser.error(f"max_lr ({max_lr:g}) must be above min_lr ({min_lr:g}): swap them")
    if num_training < MIN_STEPS:
        parser.error(
            f"num_training must be >= {MIN_STEPS} (the suggestion skips the first 10 steps and the last), got"
            f" {num_training}: e.g. 100"
        )
    run_dir = location(trainer.log_dir or ".")
    preset = location(output) if output else run_dir / "lr_find.yaml"
    refuse_existing(parser, [preset, preset.with_suffix(".png")], overwrite)
    # The test takes its own number of steps, whatever the configured run's length: lift the epoch limit that
    # would end it early, and size the configured schedule (which the finder replaces) to the test.
    run_exactly(trainer, num_training)
    with stopped_by_signals(trainer, "the LR range test"):
        finder = Tuner(trainer).lr_find(
            model,
            datamodule=datamodule,
            min_lr=min_lr,
            max_lr=max_lr,
            num_training=num_training,
            mode=mode,
            early_stop_threshold=early_stop_threshold,
            update_attr=False,
        )
    assert finder is not None, "Lightning skips the finder only under fast_dev_run, refused above"
    lrs, losses = finder.results["lr"], finder.results["loss"]
    best = steepest_descent(lrs, losses, log_x=mode == "exponential")
    if trainer.is_global_zero:  # every process has the result; one reports it and writes the files
        diverged = " (stopped early: the loss diverged)" if len(lrs) < num_training else ""
        print(f"LR range test, {mode} from {min_lr:g} to {max_lr:g}: {len(lrs)} of {num_training} steps{diverged}")
        print(text_plot(lrs, losses, best, width, height, log_x=mode == "exponential"))
    if best is None:
        raise SystemExit("error: the LR range test gave no suggestion (too few finite losses): raise --num_training")
    found = Found(key, config.get(key), float(f"{lrs[best]:.3g}"), preset)
    if trainer.is_global_zero:
        write_preset(found, f"`{current().program} lr_find`: the LR of steepest descent of the test's loss", overwrite)
        png = save_lr_plot(finder, best, preset.with_suffix(".png"))
        print(f"suggested {key}: {found.value:g} (configured: {found.configured:g})")
        print(f"plot: {png}" if png is not None else "plot: install matplotlib for a PNG of it")
        print(f"preset: {found.preset}\ntrain with it: {run_again(config, found.preset)}")
    return found


def batch_size_find(
    trainer: pl.Trainer,
    model: pl.LightningModule,
    datamodule: pl.LightningDataModule | None = None,
    command: CommandLine | None = None,
    mode: Literal["power", "binsearch"] = "power",
    steps_per_trial: int = 3,
    init_val: int = 2,
    max_trials: int = 25,
    max_val: int = 8192,
    margin: float = 0.05,
    batch_size_key: str | None = None,
    output: str | None = None,
    overwrite: bool = False,
) -> Found:
    """Finds the largest batch size whose training steps fit in memory and writes it as a preset.

    Lightning's batch-size scaling of the datamodule's attribute; writes ``<run directory>/batch_size_find.yaml``.
    On a CPU no out-of-memory is detected: the result then only bounds the search, as the output says. A bad key,
    or a preset that exists (without ``overwrite``), exits 2 before anything runs; a stop signal exits 128 + its
    number, with nothing written.

    Args:
        trainer: The command's Trainer.
        model: The model from the config.
        datamodule: The data, whose batch size attribute is scaled.
        command: The command line's parser and parsed config (given by the CLI, not a flag): the preset's key.
        mode: ``power`` doubles until a step fails; ``binsearch`` then bisects between the last two sizes.
        steps_per_trial: Training steps run at each batch size.
        init_val: First batch size tried.
        max_trials: Most batch sizes tried.
        max_val: Largest batch size tried.
        margin: ``binsearch`` only: the result is lowered by this fraction, as a safety buffer.
        batch_size_key: Config key the preset sets; ``null``: the one key under ``data`` named ``batch_size``
            (e.g. ``data.init_args.batch_size``); the datamodule attribute of that name is scaled.
        output: Path of the preset; ``null``: ``<run directory>/batch_size_find.yaml``.
        overwrite: Replace the preset if it exists; without it the command stops and keeps it.
    """
    parser, config = command_config(trainer, command)
    if datamodule is None:
        parser.error("batch_size_find scales a datamodule's batch size, and this command has none (--data null)")
    key = key_or_exit(parser, config, batch_size_key, ("data",), BATCH_SIZE_NAMES, "batch_size_key")
    attribute = key.rsplit(".", 1)[-1]
    if trainer.world_size > 1:
        parser.error("batch_size_find runs on one device: Lightning's finder refuses distributed strategies")
    if not hasattr(datamodule, attribute):
        parser.error(f"--batch_size_key {key}: {type(datamodule).__name__} has no attribute `{attribute}` to scale")
    if lightning_hasattr(model, attribute):  # Lightning looks at the model first and would scale the model's
        parser.error(f"{type(model).__name__} has `{attribute}` too: the finder would scale it, not the data's")
    preset = location(output) if output else location(trainer.log_dir or ".") / "batch_size_find.yaml"
    refuse_existing(parser, [preset], overwrite)
    # As in `lr_find`: each trial runs its own number of steps, whatever the configured run's length.
    run_exactly(trainer, steps_per_trial)
    finder = _BatchSizeFinder(mode, steps_per_trial, init_val, max_trials, attribute, margin, max_val)
    end_fit_when_found(finder)
    trainer.callbacks = [finder, *trainer.callbacks]  # type: ignore[attr-defined]
    with stopped_by_signals(trainer, "the batch size search"):
        trainer.fit(model, datamodule=datamodule)
    size = finder.optimal_batch_size
    assert size is not None, "Lightning skips the finder only under fast_dev_run, refused above"
    print(f"batch size scaling ({mode}) from {init_val}: {size}")
    if isinstance(trainer.accelerator, CPUAccelerator):
        print(
            f"on CPU this only bounds memory: a CPU does not report out-of-memory (the system swaps or kills the"
            f" process first), so {size} is where the search stopped (max_val {max_val}, max_trials {max_trials}"
            " or the training set's size), not a measured limit; choose the batch size for speed and accuracy"
        )
    found = Found(key, config.get(key), size, preset)
    write_preset(found, f"`{current().program} batch_size_find`: Lightning's batch-size scaling", overwrite)
    print(f"{key}: {size} (configured: {found.configured})")
    print(f"preset: {found.preset}\ntrain with it: {run_again(config, found.preset)}")
    return found


class _BatchSizeFinder(BatchSizeFinder):
    """Lightning's ``BatchSizeFinder``, its trials run without the configured LR schedule.

    The trials step the optimizer one after the other, and with it the schedule: one sized to the run
    (``OneCycleLR`` over ``estimated_stepping_batches``) runs out of steps after a few trials and raises.
    The LR does not change what fits in memory.
    """

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        trainer.strategy.lr_scheduler_configs = []
        super().on_fit_start(trainer, pl_module)


def steepest_descent(
    lrs: list[float], losses: list[float], log_x: bool, skip_begin: int = 10, skip_end: int = 1
) -> int | None:
    """The index of the steepest descent of the finite losses against the LR (log10 of it with ``log_x``).

    Lightning's ``suggestion()``, differentiated against log10(LR) when the LRs grow exponentially: Lightning
    2.6 differentiates against the LR itself, which inflates slopes at the smallest LRs and so favours them
    (lightning#21141). ``None`` with fewer than 2 finite points after skipping the first and last ones.
    """
    window = range(skip_begin, len(losses) - skip_end)
    kept = [i for i in window if math.isfinite(losses[i])]
    if len(kept) < 2:
        return None
    x = torch.as_tensor([math.log10(lrs[i]) if log_x else lrs[i] for i in kept], dtype=torch.float64)
    y = torch.as_tensor([losses[i] for i in kept], dtype=torch.float64)
    return kept[int(torch.gradient(y, spacing=[x])[0].argmin())]


@contextlib.contextmanager
def stopped_by_signals(trainer: pl.Trainer, what: str) -> Iterator[None]:
    """Stops a tuner's run at the next batch on SIGTERM, SIGUSR1, SIGHUP or Ctrl-C and exits with the signal's code.

    Lightning's tuners train in a loop of their own, without the run's callbacks, so the kit's ``Preemption`` never
    sees the signal (the test ran to its end, wrote the preset and exited 0). Stopped, Lightning restores the model
    from its hidden checkpoint (``.lr_find_*.ckpt``, ``.scale_batch_size_*.ckpt``) and deletes it; nothing is written.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in STOPS} if main else {}

    def stop(signum: int, frame: FrameType | None) -> None:
        handler = previous.get(signum)
        if callable(handler):
            handler(signum, frame)  # the command's own handler: it records the signal and says so
        request_stop(trainer)

    for signum in previous:
        signal.signal(signum, stop)
    try:
        if STOP.pending is not None:  # came while the command set up
            request_stop(trainer)
        yield
    except SIGTERMException:
        signum = STOP.consume() or signal.SIGTERM
        rank_zero_info(f"{signal.Signals(signum).name}: {what} stopped; nothing written")
        raise SystemExit(exit_code(signum)) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
