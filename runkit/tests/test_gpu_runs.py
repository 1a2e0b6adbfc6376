"""On a CUDA GPU (``make test-gpu``), on the fixture task: fp16 scales the loss and clips the unscaled gradients, a
network compiled in place builds its graphs once, the peak memory is logged every epoch, and the benchmark preset
autotunes cuDNN. Marked ``gpu``: they skip without one. Moved here from the generated project's tests, which
re-checked them on the example."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from support import config_flags

from runkit.testing import probes

pytestmark = pytest.mark.gpu
ON_GPU = ("--trainer.accelerator=gpu", "--trainer.devices=1")


def test_fp16_scales_the_loss_and_clips_the_unscaled_gradients(run_cli: Callable[..., object]) -> None:
    threshold = 1e-4  # below the fixture's gradient norms: every step is clipped
    built = run_cli(
        "fit",
        *config_flags("debug/tiny", "precision/fp16", "training/clip_norm"),
        *ON_GPU,
        f"--trainer.gradient_clip_val={threshold}",
        "--trainer.callbacks+=runkit.testing.probes.GradientRecorder",
    )
    scaler = built.trainer.precision_plugin.scaler
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler.get_scale() > 1.0
    recorded = probes.find(built.trainer, probes.GradientRecorder)
    assert recorded.after  # steps the scaler did not skip (an overflow skips one and lowers the scale)
    assert max(recorded.after) <= threshold * (1 + 1e-3)
    assert min(recorded.before) > threshold
    logged = probes.read_scalars(built.trainer.log_dir)["train/grad_norm"]
    # The logged norm is the unscaled one, before clipping: what the optimizer would have seen unclipped.
    assert [value for _, value in logged] == pytest.approx(recorded.before, rel=1e-3)
    assert max(recorded.before) < scaler.get_scale()


def test_a_network_compiled_in_place_on_cuda_builds_its_graphs_once(run_cli: Callable[..., object]) -> None:
    before = probes.graphs_compiled()
    built = run_cli(
        "fit",
        *config_flags("debug/tiny", "precision/bf16"),
        *ON_GPU,
        "--model=test_compiled.CompiledRegressor",  # the fixture's model, compiled in configure_model
        "--trainer.callbacks+=runkit.testing.probes.GraphCounter",
    )
    after_step = probes.find(built.trainer, probes.GraphCounter).after_step
    assert after_step[0] - before == 2  # training, and evaluation in the sanity check
    assert after_step == [after_step[0]] * len(after_step)  # no recompilation across steps and epochs
    state = torch.load(Path(built.trainer.log_dir, "checkpoints/last.ckpt"), weights_only=True)["state_dict"]
    assert not [key for key in state if "_orig_mod" in key]


def test_peak_memory_is_logged_every_epoch(run_cli: Callable[..., object]) -> None:
    built = run_cli("fit", *config_flags("debug/tiny"), *ON_GPU)
    peaks = [value for _, value in probes.read_scalars(built.trainer.log_dir)["perf/peak_memory_gib"]]
    assert len(peaks) == built.trainer.max_epochs
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    assert all(0 < peak < total for peak in peaks)


def test_benchmark_preset_autotunes_cudnn(run_cli: Callable[..., object]) -> None:
    built = run_cli("fit", *config_flags("debug/tiny", "training/benchmark"), *ON_GPU)
    assert built.trainer.global_step > 0
    assert torch.backends.cudnn.benchmark is True  # put back after the test (runkit.testing.fixtures)
