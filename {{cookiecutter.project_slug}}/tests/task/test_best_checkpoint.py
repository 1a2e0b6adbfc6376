"""The example's best checkpoint follows the metric a command names, in that metric's direction."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SMALL = ["--data.init_args.image_size=16", "--data.init_args.num_workers=0", "--trainer.limit_val_batches=1"]


def logged(run_dir: Path, tag: str) -> list[float]:
    (events,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    return [event.value for event in accumulator.Scalars(tag)]


@pytest.mark.parametrize(
    ("flags", "monitor", "mode"),
    [
        ([], "val/acc", "max"),  # configs/example/model.yaml's
        (["--best_checkpoint.monitor=val/loss"], "val/loss", "min"),  # the preset said `mode: max` for val/acc
        (["--best_checkpoint.monitor=null"], "val/loss", "min"),  # followed: the loss the example logs
    ],
    ids=["preset", "named-loss", "followed-loss"],
)
def test_best_ckpt_holds_the_best_value_of_the_named_metric(
    run_cli: Callable[..., object], lightning_log: list[str], flags: list[str], monitor: str, mode: str
) -> None:
    fitted = run_cli("fit", *SMALL, "--trainer.max_epochs=3", *flags)
    run_dir = Path(fitted.trainer.log_dir)  # type: ignore[attr-defined]
    values = logged(run_dir, monitor)
    assert len(values) == 3
    assert len(set(values)) > 1, values  # validations that differ: a choice to get wrong
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["BestCheckpoint"]
    assert (state["monitor"], state["mode"]) == (monitor, mode)
    best = (min if mode == "min" else max)(values)
    assert float(state["best_model_score"]) == pytest.approx(best)
    assert torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)["epoch"] == values.index(best)
    if flags == ["--best_checkpoint.monitor=null"]:
        assert any("best_checkpoint: follows val/loss (min)" in line for line in lightning_log)
