"""CUDA only: tokens/s and model FLOPs utilisation (MFU) of the Transformer, bf16 autocast, eager and compiled.

Skipped without a GPU. A token is one image patch. FLOPs per step (forward and backward) are counted by
Lightning's ``measure_flops``; the peak comes from Lightning's table of devices (``get_available_flops``),
so MFU is missing on a GPU it does not list. Two sizes: the configured Transformer, which is far too small
to keep a GPU busy, and a wider one that shows what the same code reaches when it can.
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import Row, build, project
from lightning.fabric.utilities.throughput import get_available_flops, measure_flops
from torch import nn

WIDE = {"patch_size": 4, "dim": 512, "depth": 8, "heads": 8, "mlp_ratio": 4.0}  # 49 tokens per 28x28 image


def step_seconds(network: nn.Module, images: torch.Tensor, labels: torch.Tensor, steps: int) -> float:
    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-4)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(network(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(3):  # compile, allocator and cuDNN warm-up
        step()
    durations = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    if not torch.cuda.is_available():
        return [Row("CUDA Transformer, bf16 + compile", "eager", float("nan"), "compiled", float("nan"), "tokens/s",
                    note="skipped: no CUDA device")]  # fmt: skip
    with tempfile.TemporaryDirectory() as run_dir:
        built = build(Path(run_dir), presets=("example/transformer",))
    data, configured = built.datamodule, built.model.network
    networks = project("task.networks")
    sizes = {"configured": configured}
    if not tiny:
        sizes["wide"] = networks.TransformerClassifier(data.num_classes, data.input_shape, **WIDE)
    batch = data.batch_size if tiny else 4 * data.batch_size
    device = torch.device("cuda")
    rows = []
    for name, network in sizes.items():
        network = network.to(device)
        images = torch.randn(batch, data.in_channels, data.image_size, data.image_size, device=device)
        labels = torch.randint(0, data.num_classes, (batch,), device=device)
        tokens = batch * network.pos_embed.shape[1]
        meta, meta_images = copy.deepcopy(network).to("meta"), images.to("meta")  # counted, not computed
        flops = measure_flops(meta, lambda meta=meta, x=meta_images: meta(x), loss_fn=torch.Tensor.sum)
        peak = get_available_flops(device, torch.bfloat16)
        steps = 5 if tiny else 50
        eager = statistics.median(step_seconds(network, images, labels, steps) for _ in range(repeats))
        compiled_network = copy.deepcopy(network)
        compiled_network.compile()
        compiled = statistics.median(step_seconds(compiled_network, images, labels, steps) for _ in range(repeats))
        mfu = f"MFU eager {flops / eager / peak:.1%}, compiled {flops / compiled / peak:.1%}" if peak else "MFU n/a"
        rows.append(
            Row(
                f"CUDA Transformer ({name}, batch {batch}), bf16-mixed",
                "eager",
                tokens / eager,
                "compiled",
                tokens / compiled,
                "tokens/s",
                note=f"{mfu}; {flops / 1e9:.1f} GFLOP per step",
            )
        )
    return rows
