"""The learning rate of every optimizer step of a run, worked out from the configs without training.

The Trainer, model and data are the ones ``fit`` would use, and the schedule is built by the module's own
``configure_optimizers``, so its length comes from ``trainer.estimated_stepping_batches`` exactly as in
``fit`` (accumulation, devices, ``max_epochs``/``max_steps``). Nothing is written to disk.
"""

from __future__ import annotations

import math
import warnings

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn

from ..bad_input import BadInputError
from ..lightning_internals.tools import attach_for_fit, configured_optimizers, end_fit_loop


def learning_rates(
    trainer: pl.Trainer, model: pl.LightningModule, datamodule: pl.LightningDataModule | None
) -> list[float]:
    """The LR of the first parameter group of the first optimizer at each optimizer step of the run."""
    trainer.state.fn = TrainerFn.FITTING
    trainer.training = True
    attach_for_fit(trainer, model, datamodule)
    try:
        # The function `fit` calls: it runs `configure_optimizers` and normalises its output.
        optimizers, schedulers = configured_optimizers(model)
        total = trainer.estimated_stepping_batches
    finally:
        end_fit_loop(trainer)  # stops DataLoader workers started to count the batches
    if not math.isfinite(total):
        raise ValueError("the run has no end (max_epochs=-1 and max_steps=-1): set trainer.max_steps")
    optimizer = optimizers[0]
    config = schedulers[0] if schedulers else None
    if config is not None and config.interval == "epoch":
        steps_per_interval = math.ceil(trainer.num_training_batches / trainer.accumulate_grad_batches)
    else:
        steps_per_interval = 1
    rates = []
    with warnings.catch_warnings():
        # The scheduler is stepped without `optimizer.step()`: nothing trains here.
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
        for step in range(int(total)):
            rates.append(float(optimizer.param_groups[0]["lr"]))
            if config is not None and (step + 1) % (steps_per_interval * config.frequency) == 0:
                config.scheduler.step()  # type: ignore[call-arg]  # a ReduceLROnPlateau would need a metric
    return rates


def key_steps(rates: list[float], points: int) -> list[int]:
    """``points`` evenly spaced steps from the first to the last, plus the step of the highest LR."""
    last = len(rates) - 1
    spaced = {round(i * last / max(1, points - 1)) for i in range(points)}
    return sorted(spaced | {max(range(len(rates)), key=rates.__getitem__)})


def plot(rates: list[float], width: int, height: int) -> str:
    """A text plot of ``rates`` against the step: ``width`` columns, ``height`` rows."""
    low, high = min(rates), max(rates)
    span = high - low or 1.0
    columns = [rates[round(c * (len(rates) - 1) / max(1, width - 1))] for c in range(width)]
    rows = [[" "] * width for _ in range(height)]
    for c, rate in enumerate(columns):
        rows[height - 1 - round((rate - low) / span * (height - 1))][c] = "*"
    labels = [f"{high:9.3g} |", *[" " * 9 + " |"] * (height - 2), f"{low:9.3g} |"] if height > 1 else [f"{high:9.3g} |"]
    lines = [label + "".join(row) for label, row in zip(labels, rows, strict=True)]
    axis = f"step 0{' ' * max(1, width - 6 - len(str(len(rates) - 1)))}{len(rates) - 1}"
    return "\n".join([*lines, " " * 10 + "+" + "-" * width, " " * 11 + axis])


def format_preview(rates: list[float], points: int = 11, width: int = 60, height: int = 12) -> str:
    """The LR at key steps as a table, followed by the text plot."""
    lines = [f"{len(rates)} optimizer steps", f"{'step':>8}  {'lr':>12}"]
    lines += [f"{step:>8}  {rates[step]:>12.6g}" for step in key_steps(rates, points)]
    return "\n".join([*lines, "", plot(rates, width, height)])


def schedule(
    trainer: pl.Trainer,
    model: pl.LightningModule,
    datamodule: pl.LightningDataModule | None = None,
    points: int = 11,
    width: int = 60,
    height: int = 12,
) -> list[float]:
    """Prints the learning rate at key optimizer steps of the configured run, and a plot, without training.

    Args:
        trainer: The Trainer ``fit`` would use (its length, devices, accumulation).
        model: The model whose ``configure_optimizers`` builds the schedule.
        datamodule: The data, whose length sets the number of steps.
        points: Evenly spaced steps listed in the table (the step of the highest LR is added).
        width: Columns of the plot.
        height: Rows of the plot.
    """
    for name, value in {"points": points, "width": width, "height": height}.items():
        if value < 2:
            raise BadInputError(f"{name} must be >= 2, got {value}")
    rates = learning_rates(trainer, model, datamodule)
    print(format_preview(rates, points, width, height))
    return rates
