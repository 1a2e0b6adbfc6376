"""Compiled against eager: the configured Transformer's training step, compile time cold and warm, recompilations.

The compiled variant is what ``configs/example/compile.yaml`` gives ``fit``: the network compiled in place
(``nn.Module.compile``) and the optimizer rebuilt with a fused step (the kit's ``with_fast_step``). The
eager side is the configured run as it is (on a CPU, PyTorch's AdamW loops over the parameters in Python).

Each process (``python bench/compiled.py``) builds both sides from the same seeded objects and alternates their
steps, one each, on the same batch: steps are paired in time, so load on the machine hits both. Processes run
in pairs on one inductor cache: the first compiles cold, the second finds what the first left on disk. After
the timed steps one validation pass (eval mode, inference mode, a full and a last partial batch) shows the
graphs a ``fit`` compiles besides the training one. ``--profile true`` prints where each side's time goes.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from common import Row, build, judge, quartiles
from jsonargparse import CLI
from torch.profiler import ProfilerActivity, profile

CHUNK = 10  # paired steps per repeat


def worker(steps: int = 30, backend: str = "inductor", profile_steps: int = 0) -> dict[str, object]:
    """Times one process's eager and compiled steps, alternated, and prints the result as JSON.

    Args:
        steps: Timed steps per side after the first.
        backend: ``torch.compile`` backend (``eager`` traces without generating code: a quick check).
        profile_steps: Profile this many steps of each side afterwards and print the tables (0: none).
    """
    with tempfile.TemporaryDirectory() as run_dir:
        built = build(Path(run_dir), presets=("example/transformer",))
    data, factory = built.datamodule, built.model.optimizer_factory
    eager = built.model.network
    compiled = copy.deepcopy(eager)  # the same weights
    with_fast_step = importlib.import_module("runkit").with_fast_step
    optimizers = {"eager": factory(eager.parameters()), "compiled": with_fast_step(factory(compiled.parameters()))}
    compiled.compile(backend=backend)
    shape = (data.batch_size, data.in_channels, data.image_size, data.image_size)
    images, labels = torch.randn(shape), torch.randint(0, data.num_classes, (data.batch_size,))
    networks = {"eager": eager, "compiled": compiled}

    def step(side: str) -> tuple[float, float]:
        """One training step of ``side``: seconds in forward and backward, and in the optimizer."""
        start = time.perf_counter()
        loss = F.cross_entropy(networks[side](images), labels)
        optimizers[side].zero_grad()
        loss.backward()
        middle = time.perf_counter()
        optimizers[side].step()
        return middle - start, time.perf_counter() - middle

    eager.train(), compiled.train()
    step("eager")
    start = time.perf_counter()
    step("compiled")  # compiles
    first = time.perf_counter() - start
    durations: dict[str, list[tuple[float, float]]] = {"eager": [], "compiled": []}
    for index in range(steps):
        for side in ("eager", "compiled") if index % 2 == 0 else ("compiled", "eager"):
            durations[side].append(step(side))
    train_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    if profile_steps:
        for side in networks:
            with profile(activities=[ProfilerActivity.CPU]) as profiled:
                for _ in range(profile_steps):
                    step(side)
            print(f"{side} ({profile_steps} steps):", file=sys.stderr)
            print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), file=sys.stderr)
    compiled.eval()
    start = time.perf_counter()
    with torch.inference_mode():
        compiled(images)
        compiled(images[: max(1, data.sizes["val"] % data.batch_size)])  # the last, partial validation batch
    result = {
        "first_s": first,
        "durations": durations,
        "train_graphs": train_graphs,
        "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
        "validation_s": time.perf_counter() - start,
    }
    print(json.dumps(result))
    return result


def spawn(steps: int, backend: str, cache_dir: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "ignore"}
    args = [sys.executable, __file__, f"--steps={steps}", f"--backend={backend}"]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:  # say why: its output is captured
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def per_repeat(runs: list[dict], side: str, part: Callable[[list[float]], float]) -> list[float]:
    """``side``'s step time (s) per repeat of ``CHUNK`` paired steps, over all processes."""
    values = []
    for result in runs:
        steps = [part(step) for step in result["durations"][side]]
        values += [statistics.median(steps[i : i + CHUNK]) for i in range(0, len(steps) - CHUNK + 1, CHUNK)]
    return values


def part_of(index: int) -> Callable[[list[float]], float]:
    """The ``index``-th part of a step: 0 forward and backward, 1 the optimizer."""
    return lambda step: step[index]


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps, backend = (CHUNK, "eager") if tiny else (3 * CHUNK, "inductor")
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(1 if tiny else min(repeats, 3)):  # a cold compile costs tens of seconds on a CPU
        cache_dir = tempfile.mkdtemp(prefix="inductor-", dir=workdir)
        runs["cold"].append(spawn(steps, backend, cache_dir))
        runs["warm"].append(spawn(steps, backend, cache_dir))  # the cache the cold run just filled
    every = runs["cold"] + runs["warm"]
    sides = {side: per_repeat(every, side, sum) for side in ("eager", "compiled")}
    speedups = [e / c for e, c in zip(sides["eager"], sides["compiled"], strict=True)]
    parts = {
        side: [1e3 * statistics.median(per_repeat(every, side, part)) for part in (part_of(0), part_of(1))]
        for side in sides
    }
    compile_s = {
        kind: statistics.median(r["first_s"] for r in results) - statistics.median(sides["compiled"])
        for kind, results in runs.items()
    }
    graphs = int(statistics.median(r["graphs"] for r in runs["cold"]))
    train_graphs = int(statistics.median(r["train_graphs"] for r in runs["cold"]))
    validation_s = statistics.median(r["validation_s"] for r in runs["cold"])
    ratios = [1 / speedup for speedup in speedups]
    q1, speedup, q3 = quartiles(speedups)
    return [
        Row(
            f"Compiled Transformer training step ({backend}), network and optimizer",
            "eager",
            1e3 * statistics.median(sides["eager"]),
            "compiled",
            1e3 * statistics.median(sides["compiled"]),
            "ms",
            goal=">= 1.3x faster (ratio <= 0.77)",
            met=judge(ratios, 1 / 1.3),
            note=f"{speedup:.2f}x faster (IQR {q1:.2f}-{q3:.2f}); forward + backward {parts['eager'][0]:.1f} -> "
            f"{parts['compiled'][0]:.1f} ms, optimizer {parts['eager'][1]:.2f} -> {parts['compiled'][1]:.2f} ms "
            f"(fused); alternated step by step, {len(every)} processes",
            repeats=ratios,
        ),
        Row(
            "Compile time, first training step",
            "warm cache",
            compile_s["warm"],
            "cold cache",
            compile_s["cold"],
            "s",
            note=f"training graphs {train_graphs} (recompilations {train_graphs - 1}); a validation pass adds "
            f"{graphs - train_graphs} graph(s) in {validation_s:.1f} s cold",
        ),
    ]


if __name__ == "__main__":
    CLI(worker)
