"""Debug presets: fast_dev_run, overfit (the loss must reach ~0), limit_batches and detect_anomaly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from runkit.testing import probes
from support import SMALL_RUN


def test_fast_dev_run_takes_one_batch_and_writes_nothing(run_cli: Callable[..., object]) -> None:
    built = run_cli("fit", presets=("debug/fast_dev_run",))
    assert built.trainer.global_step == 1
    assert built.trainer.num_val_batches == [1]
    assert not Path("runs").exists()  # no events, no checkpoints


@pytest.mark.slow  # 50 short epochs
def test_overfit_drives_the_training_loss_to_zero(run_cli: Callable[..., object]) -> None:
    built = run_cli("fit", presets=(*SMALL_RUN, "example/overfit"))
    assert built.trainer.num_training_batches == 2
    epoch_losses = [value for _, value in probes.read_scalars(built.trainer.log_dir)["train/loss_epoch"]]
    assert len(epoch_losses) == 50
    assert epoch_losses[0] > 1.5  # chance level is ln(10) = 2.3
    assert epoch_losses[-1] < 0.02  # ~0.005 on the reference machine


def test_limit_batches_takes_a_fraction_of_each_epoch(run_cli: Callable[..., object]) -> None:
    # 2560 / 32 = 80 training and 640 / 32 = 20 validation batches; the preset keeps a tenth of each.
    sizes = ["--data.init_args.train_size=2560", "--data.init_args.val_size=640"]
    built = run_cli("fit", *sizes, "--trainer.max_epochs=1", presets=(*SMALL_RUN, "debug/limit_batches"))
    assert built.trainer.num_training_batches == 8
    assert built.trainer.num_val_batches == [2]
    assert built.trainer.global_step == 8


def test_detect_anomaly_names_the_operation_that_made_nan(run_cli: Callable[..., object]) -> None:
    network = "--model.network=runkit.testing.probes.NanGradientNet"  # finite forward, NaN backward
    with pytest.raises(RuntimeError, match="Function '_NanBackwardBackward' returned nan values"):
        run_cli("fit", network, presets=(*SMALL_RUN, "debug/detect_anomaly"))
