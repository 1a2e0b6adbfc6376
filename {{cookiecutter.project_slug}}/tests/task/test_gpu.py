"""On a CUDA GPU (``make test-gpu``): the example's throughput row. Marked ``gpu``: skipped without a GPU, run
together by ``make test-gpu`` (``scripts/test_gpu.py``). It measures and prints its row (tokens/s and model FLOPs
utilisation); like every test, it asserts behaviour, not speed. What runkit does on a GPU (compiled, fused steps,
peak memory) is its own suite's (its ``make test-gpu``).
"""

from __future__ import annotations

import copy
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from lightning.fabric.utilities.throughput import get_available_flops, measure_flops
from runkit.testing import probes
from support import ROOT
from torch import nn


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
