"""The clipping presets on the fixture task: the optimizer never sees more than the threshold, and the pre-clip global
gradient norm is logged at the logging steps, computed only then (``observe/monitoring.py``). Moved here from the
generated project's tests, which re-checked it on the example."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch
from support import config_flags

from runkit.testing import probes

RECORDER = "--trainer.callbacks+=runkit.testing.probes.GradientRecorder"
STEPS = 8  # debug/tiny: 2 epochs x 4 batches


def test_norm_clipping_caps_the_global_norm_and_logs_the_raw_one(run_cli: Callable[..., object]) -> None:
    threshold = 1e-4  # far below the fixture's gradient norms, so every step is clipped
    built = run_cli(
        "fit", *config_flags("debug/tiny", "training/clip_norm"), f"--trainer.gradient_clip_val={threshold}", RECORDER
    )
    assert built.trainer.gradient_clip_algorithm == "norm"
    recorded = probes.find(built.trainer, probes.GradientRecorder)
    assert len(recorded.before) == len(recorded.after) == STEPS
    for before, after in zip(recorded.before, recorded.after, strict=True):
        assert before > threshold
        assert after == pytest.approx(threshold, rel=1e-4)  # scaled down to the threshold, not below
    logged = probes.read_scalars(built.trainer.log_dir)["train/grad_norm"]
    assert [step for step, _ in logged] == list(range(STEPS))  # every optimizer step (log_every_n_steps: 1)
    assert [value for _, value in logged] == pytest.approx(recorded.before, rel=1e-5)  # the norm before clipping


def test_grad_norm_is_computed_only_at_logging_steps_before_clipping(
    run_cli: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    threshold, every = 1e-4, 3  # every step clipped; Lightning logs steps 2 and 5 of 8
    computed: list[float] = []
    total_norm = torch.nn.utils.get_total_norm  # the monitor's; Lightning's clipping calls torch's private one

    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        norm = total_norm(*args, **kwargs)
        if sys._getframe(1).f_code.co_filename.endswith("monitoring.py"):  # not the non-finite weights check
            computed.append(float(norm))
        return norm

    monkeypatch.setattr(torch.nn.utils, "get_total_norm", counted)
    built = run_cli(
        "fit",
        *config_flags("debug/tiny", "training/clip_norm"),
        f"--trainer.gradient_clip_val={threshold}",
        f"--trainer.log_every_n_steps={every}",
    )
    logged = probes.read_scalars(built.trainer.log_dir)
    steps = [step for step, _ in logged["train/grad_norm"]]
    assert steps == [step for step, _ in logged["train/loss_step"]] == [2, 5]  # Lightning's logging steps
    assert len(computed) == len(steps)  # and computed at no other step
    assert [value for _, value in logged["train/grad_norm"]] == pytest.approx(computed, rel=1e-6)
    assert min(computed) > threshold  # the norm before clipping (after it, every step's is the threshold)


def test_value_clipping_caps_every_element(run_cli: Callable[..., object]) -> None:
    threshold = 2.0**-14  # exact in float32, like the gradients
    built = run_cli(
        "fit", *config_flags("debug/tiny", "training/clip_value"), f"--trainer.gradient_clip_val={threshold}", RECORDER
    )
    assert built.trainer.gradient_clip_algorithm == "value"
    recorded = probes.find(built.trainer, probes.GradientRecorder)
    assert len(recorded.after_max) == STEPS
    assert max(recorded.after_max) <= threshold
    assert min(recorded.before) > threshold  # so clipping had work to do
