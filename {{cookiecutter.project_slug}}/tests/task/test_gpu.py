"""On a CUDA GPU (``make test-gpu``): loss scaling with clipping, compile, peak memory, cuDNN autotuning, throughput.

Each is marked ``gpu``: skipped without a GPU, run together by ``make test-gpu`` (``scripts/test_gpu.py``). The
throughput test measures and prints its row (tokens/s and model FLOPs utilisation); like every test, it asserts
behaviour, not speed.
"""

from __future__ import annotations

import copy
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lightning.fabric.utilities.throughput import get_available_flops, measure_flops
from runkit.testing import probes
from support import ROOT, SMALL_RUN
from torch import nn

RECORDER = "--trainer.callbacks+=runkit.testing.probes.GradientRecorder"

ON_GPU = ("--trainer.accelerator=gpu", "--trainer.devices=1")
SMALL_TRANSFORMER = ("--model.network.init_args.depth=1", "--model.network.init_args.dim=32")


@pytest.mark.gpu
def test_fp16_scales_the_loss_and_clips_the_unscaled_gradients(run_cli: Callable[..., object]) -> None:
    threshold = 0.05  # below this model's gradient norms: every step is clipped
    built = run_cli(
        "fit", *ON_GPU, f"--trainer.gradient_clip_val={threshold}", RECORDER,
        presets=(*SMALL_RUN, "precision/fp16", "training/clip_norm"),
    )  # fmt: skip
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


@pytest.mark.gpu
def test_compiled_fit_on_cuda_steps_fused_and_compiles_once(run_cli: Callable[..., object]) -> None:
    before = probes.graphs_compiled()
    built = run_cli(
        "fit", *ON_GPU, *SMALL_TRANSFORMER, "--trainer.callbacks+=runkit.testing.probes.GraphCounter",
        presets=(*SMALL_RUN, "example/transformer", "example/compile", "precision/bf16"),
    )  # fmt: skip
    (optimizer,) = built.trainer.optimizers
    assert optimizer.defaults["fused"] is True
    after_step = probes.find(built.trainer, probes.GraphCounter).after_step
    assert after_step[0] - before == 2  # training, and evaluation in the sanity check
    assert after_step == [after_step[0]] * len(after_step)  # no recompilation across steps and epochs
    state = torch.load(Path(built.trainer.log_dir, "checkpoints/last.ckpt"), weights_only=True)["state_dict"]
    assert not [key for key in state if "_orig_mod" in key]


@pytest.mark.gpu
def test_peak_memory_is_logged_every_epoch(run_cli: Callable[..., object]) -> None:
    built = run_cli("fit", *ON_GPU)
    peaks = [value for _, value in probes.read_scalars(built.trainer.log_dir)["perf/peak_memory_gib"]]
    assert len(peaks) == built.trainer.max_epochs
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    assert all(0 < peak < total for peak in peaks)


@pytest.mark.gpu
def test_benchmark_preset_autotunes_cudnn(run_cli: Callable[..., object]) -> None:
    enabled = torch.backends.cudnn.benchmark
    try:
        built = run_cli("fit", *ON_GPU, presets=(*SMALL_RUN, "training/benchmark"))
        assert built.trainer.global_step > 0
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = enabled


def steps_per_second(network: nn.Module, images: torch.Tensor, labels: torch.Tensor, fused: bool) -> list[float]:
    """Seconds of 30 bf16-autocast training steps after 3 warm-up steps (compilation, cuDNN, the allocator)."""
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4, fused=fused)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(network(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(3):
        step()
    durations = []
    for _ in range(30):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        durations.append(time.perf_counter() - start)
    return durations


@pytest.mark.gpu
@pytest.mark.parametrize(
    "size",
    [{}, {"patch_size": 4, "dim": 512, "depth": 8, "heads": 8, "mlp_ratio": 4.0}],
    ids=["configured", "wide"],
)
def test_cuda_throughput_row(networks: object, size: dict[str, object]) -> None:
    """The benchmark's CUDA row: tokens/s (a token is an image patch) and MFU, bf16-mixed, eager and compiled."""
    torch.manual_seed(0)
    device, batch = torch.device("cuda"), 256
    configured = {"patch_size": 7, "dim": 64, "depth": 3, "heads": 4, "mlp_ratio": 2.0}  # model/transformer.yaml
    network = networks.TransformerClassifier(10, (1, 28, 28), **{**configured, **size}).to(device)
    images = torch.randn(batch, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    tokens = batch * network.pos_embed.shape[1]
    meta = copy.deepcopy(network).to("meta")  # FLOPs counted, not computed
    flops = measure_flops(meta, lambda: meta(images.to("meta")), loss_fn=torch.Tensor.sum)
    peak = get_available_flops(device, torch.bfloat16)
    eager = statistics.median(steps_per_second(network, images, labels, fused=False))
    compiled_network = copy.deepcopy(network)
    compiled_network.compile()
    graphs = probes.graphs_compiled()
    compiled = statistics.median(steps_per_second(compiled_network, images, labels, fused=True))
    assert probes.graphs_compiled() - graphs <= 1  # one training graph, built in the warm-up
    mfu = f"MFU eager {flops / eager / peak:.1%}, compiled {flops / compiled / peak:.1%}" if peak else "MFU: n/a"
    print(  # shown in the report of `make test-gpu` (pytest -rA)
        f"CUDA Transformer ({'wide' if size else 'configured'}, batch {batch}, bf16-mixed): "
        f"eager {tokens / eager:,.0f} tokens/s, compiled + fused AdamW {tokens / compiled:,.0f} tokens/s "
        f"({eager / compiled:.2f}x); {mfu}; {flops / 1e9:.1f} GFLOP per step; {torch.cuda.get_device_name()}"
    )
    assert eager > 0
    assert compiled > 0
    assert flops > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, the script runs every test marked gpu")
def test_make_test_gpu_skips_cleanly_without_a_gpu(tmp_path: Path) -> None:
    script, results = ROOT / "scripts" / "test_gpu.py", tmp_path / "results.txt"
    done = subprocess.run([sys.executable, str(script), f"--output={results}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results.read_text() == "test-gpu: skipped: no CUDA GPU on this machine\n"
