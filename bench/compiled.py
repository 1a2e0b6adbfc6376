"""Compiled against eager: the configured Transformer's training step, compile time cold and warm, recompilations.

Each side runs in a fresh process (``python bench/compiled.py --mode ...``), so a cold compile really starts
from an empty inductor cache and a warm one finds only what the cold run left on disk. The network is
compiled in place with ``nn.Module.compile``, as ``Classifier(compile_network=True)`` does. After the timed
training steps, one validation pass (eval mode, inference mode, a full and a last partial batch) shows the
graphs a ``fit`` compiles besides the training one.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from common import Row, build
from jsonargparse import CLI


def worker(
    mode: Literal["eager", "compiled"] = "eager", steps: int = 30, backend: str = "inductor"
) -> dict[str, float]:
    """Times one process's training steps and prints the result as JSON.

    Args:
        mode: Run the network eagerly or compiled.
        steps: Timed steps after the first.
        backend: ``torch.compile`` backend (``eager`` traces without generating code: a quick check).
    """
    with tempfile.TemporaryDirectory() as run_dir:
        built = build(Path(run_dir), presets=("model/transformer",))
    network, data = built.model.network, built.datamodule
    optimizer = built.model.optimizer_factory(network.parameters())
    shape = (data.batch_size, data.in_channels, data.image_size, data.image_size)
    images, labels = torch.randn(shape), torch.randint(0, data.num_classes, (data.batch_size,))
    if mode == "compiled":
        network.compile(backend=backend)

    def step() -> None:
        loss = F.cross_entropy(network(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    network.train()
    start = time.perf_counter()
    step()  # compiles, when compiled
    first = time.perf_counter() - start
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        durations.append(time.perf_counter() - start)
    train_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    network.eval()
    start = time.perf_counter()
    with torch.inference_mode():
        network(images)
        network(images[: max(1, data.sizes["val"] % data.batch_size)])  # the last, partial validation batch
    result = {
        "first_s": first,
        "step_s": statistics.median(durations),
        "train_graphs": train_graphs,
        "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
        "validation_s": time.perf_counter() - start,
    }
    print(json.dumps(result))
    return result


def spawn(mode: str, steps: int, backend: str, cache_dir: str) -> dict[str, float]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "ignore"}
    args = [sys.executable, __file__, f"--mode={mode}", f"--steps={steps}", f"--backend={backend}"]
    done = subprocess.run(args, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps, backend = (3, "eager") if tiny else (30, "inductor")
    runs: dict[str, list[dict[str, float]]] = {"eager": [], "cold": [], "warm": []}
    for _ in range(min(repeats, 3)):  # a cold compile costs tens of seconds on a CPU
        cache_dir = tempfile.mkdtemp(prefix="inductor-", dir=workdir)
        runs["eager"].append(spawn("eager", steps, backend, cache_dir))
        runs["cold"].append(spawn("compiled", steps, backend, cache_dir))
        # The cache the cold run just filled (tiny: the same code path, so the cold run stands in).
        runs["warm"].append(runs["cold"][-1] if tiny else spawn("compiled", steps, backend, cache_dir))

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[side])

    # Each process reports its median step; the least disturbed process stands for its side.
    eager_ms = 1e3 * min(r["step_s"] for r in runs["eager"])
    compiled_ms = 1e3 * min(r["step_s"] for r in runs["cold"] + runs["warm"])
    compile_s = {side: median(side, "first_s") - median(side, "step_s") for side in ("cold", "warm")}
    graphs, train_graphs = int(median("cold", "graphs")), int(median("cold", "train_graphs"))
    speedup = eager_ms / compiled_ms
    return [
        Row(
            f"Compiled Transformer training step ({backend})",
            "eager",
            eager_ms,
            "compiled",
            compiled_ms,
            "ms",
            goal=">= 1.3x faster (ratio <= 0.77)",
            met=speedup >= 1.3,
            note=f"{speedup:.2f}x faster; best of {len(runs['cold'])} fresh processes' median of {steps} steps",
        ),
        Row(
            "Compile time, first training step",
            "warm cache",
            compile_s["warm"],
            "cold cache",
            compile_s["cold"],
            "s",
            note=f"training graphs {train_graphs} (recompilations {train_graphs - 1}); a validation pass adds "
            f"{graphs - train_graphs} graph(s) in {median('cold', 'validation_s'):.1f} s cold",
        ),
    ]


if __name__ == "__main__":
    CLI(worker)
