"""Any module's optimizer and schedule in one line (``runkit.configure_optimization``), configured by class path.

A torch schedule named in a config is built exactly as named (``StepLR.step_size`` stays the config's); one that
declares ``total_steps`` gets the run's length by keyword unless the config gave one; a plateau schedule steps per
epoch on its monitored metric. The schedules are parsed as a config gives them (jsonargparse's callables).
"""

from __future__ import annotations

from typing import Any, Literal

import lightning.pytorch as pl
import pytest
import torch
from jsonargparse import ArgumentParser
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from support import submodule

optimization = submodule("parts.optimization")
RUN_STEPS = 40


class Module(pl.LightningModule):
    """A module as a team writes it with the kit: the callables as arguments, one line in configure_optimizers."""

    def __init__(
        self,
        optimizer: OptimizerCallable = torch.optim.SGD,
        scheduler: LRSchedulerCallable | None = None,
        interval: Literal["step", "epoch"] | None = None,
    ) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.optimizer, self.scheduler, self.interval = optimizer, scheduler, interval

    def configure_optimizers(self) -> Any:
        return optimization.configure_optimization(self, self.optimizer, self.scheduler, interval=self.interval)


def configured(*flags: str) -> Module:
    """The module as the config ``flags`` build it, attached to a Trainer of ``RUN_STEPS`` optimizer steps."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(Module, "model")
    config = parser.parse_args(["--model.optimizer=torch.optim.SGD", "--model.optimizer.lr=0.1", *flags])
    module = parser.instantiate(config).model
    module.trainer = pl.Trainer(max_epochs=-1, max_steps=RUN_STEPS, logger=False, enable_checkpointing=False)
    return module


def test_a_torch_schedule_is_built_exactly_as_named() -> None:
    module = configured("--model.scheduler=torch.optim.lr_scheduler.StepLR", "--model.scheduler.step_size=3")
    returned = module.configure_optimizers()
    schedule = returned["lr_scheduler"]["scheduler"]
    assert isinstance(schedule, torch.optim.lr_scheduler.StepLR)
    assert schedule.step_size == 3  # not the run's length (the positional contract gave it 40)
    assert returned["lr_scheduler"]["interval"] == "step"


@pytest.mark.parametrize("name", ["torch.optim.lr_scheduler.OneCycleLR", "WarmupCosine"])
def test_a_schedule_that_declares_total_steps_gets_the_run_length(name: str) -> None:
    path = name if "." in name else f"runkit.{name}"
    module = configured(f"--model.scheduler={path}", *(["--model.scheduler.max_lr=0.5"] if "OneCycle" in name else []))
    schedule = module.configure_optimizers()["lr_scheduler"]["scheduler"]
    assert schedule.total_steps == RUN_STEPS


def test_a_run_length_the_config_gives_is_kept() -> None:
    module = configured(
        "--model.scheduler=torch.optim.lr_scheduler.OneCycleLR",
        "--model.scheduler.max_lr=0.5",
        "--model.scheduler.total_steps=100",
    )
    assert module.configure_optimizers()["lr_scheduler"]["scheduler"].total_steps == 100


def test_a_plateau_schedule_steps_per_epoch_on_the_monitored_metric_unless_told() -> None:
    plateau = ["--model.scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau", "--model.scheduler.patience=0"]
    returned = configured(*plateau).configure_optimizers()["lr_scheduler"]
    assert isinstance(returned["scheduler"], torch.optim.lr_scheduler.ReduceLROnPlateau)
    assert (returned["interval"], returned["monitor"]) == ("epoch", "val/loss")
    assert configured(*plateau, "--model.interval=step").configure_optimizers()["lr_scheduler"]["interval"] == "step"


def test_no_schedule_gives_the_optimizer_alone() -> None:
    returned = configured().configure_optimizers()
    assert isinstance(returned, torch.optim.SGD)
    assert returned.defaults["lr"] == 0.1


def test_the_class_is_found_in_jsonargparses_callable() -> None:
    # jsonargparse 4.x gives a class_path as a functools.partial holding the class: the one structure relied on.
    module = configured("--model.scheduler=torch.optim.lr_scheduler.StepLR", "--model.scheduler.step_size=3")
    assert optimization.built_class(module.scheduler) is torch.optim.lr_scheduler.StepLR
    assert optimization.built_class(torch.optim.lr_scheduler.OneCycleLR) is torch.optim.lr_scheduler.OneCycleLR
    assert optimization.takes_run_length(lambda optimizer, total_steps: None)  # a function of the team's
    assert not optimization.takes_run_length(module.scheduler)


def test_bad_values_are_refused_when_the_model_is_built() -> None:
    with pytest.raises(ValueError, match=r"^optimizer: Invalid learning rate: -1\.0$"):
        optimization.check_optimization(lambda params: torch.optim.SGD(params, lr=-1.0))
    schedules = submodule("parts.schedules")
    with pytest.raises(ValueError, match=r"^scheduler: warmup_fraction must be in \[0, 1\], got 2\.0$"):
        optimization.check_optimization(
            lambda params: torch.optim.SGD(params, lr=0.1),
            lambda optimizer, total_steps: schedules.WarmupCosine(optimizer, total_steps, warmup_fraction=2.0),
        )
