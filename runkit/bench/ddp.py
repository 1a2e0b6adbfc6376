"""Two DDP processes against one process on the CPU, correctness first.

Both sides train the Transformer (LayerNorm only, no dropout) with the same global batch: one process
with ``batch_size`` B, two processes with B / 2 each. The sampler gives the two ranks the odd and even
halves of the batch the single process sees, so after the same steps the weights must agree to rounding;
only then are the step times compared. The optimizer is SGD with momentum: Adam's first steps move every
weight by about the LR whatever the gradient's size, so a near-zero gradient whose sign differs by
rounding would show as a difference of the LR's order. Each side is a fresh ``<package> fit`` (DDP launches its second
process the same way), so process start and process-group setup show up in the wall time, not the steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import PACKAGE, TINY_PRESETS, Row, best_median_ms, config_flags, median_ratios, run_dir_flags, steady


def fit(workdir: Path, steps: int, devices: int, batch_size: int, presets: tuple[str, ...]) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix=f"ddp{devices}-", dir=workdir))
    record = run_dir / "steps.json"
    args = [
        *config_flags("example/transformer", *presets),
        "--trainer.accelerator=cpu",
        f"--trainer.devices={devices}",
        f"--trainer.strategy={'ddp' if devices > 1 else 'auto'}",
        f"--trainer.max_steps={steps}",
        "--trainer.enable_progress_bar=false",
        *run_dir_flags(run_dir),
        f"--data.init_args.batch_size={batch_size}",
        "--data.init_args.augment=false",  # augmentation is seeded per batch: batches of 2b and b draw differently
        "--model.optimizer=torch.optim.SGD",
        "--model.optimizer.init_args.lr=0.1",
        "--model.optimizer.init_args.momentum=0.9",
        "--trainer.callbacks+=common.StepTimer",  # found through PYTHONPATH, in both DDP processes
        f"--trainer.callbacks.output={record}",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", PACKAGE, "fit", *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"{devices}-process fit failed:\n{done.stderr[-3000:]}")
    result = json.loads(record.read_text())
    return {**result, "wall": wall, "state": torch.load(record.with_suffix(".pt"), weights_only=True)}


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    steps = 4 if tiny else 30
    presets = TINY_PRESETS if tiny else ()
    batch = 32 if tiny else 128
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for repeat in range(min(repeats, 3)):  # each DDP start costs seconds
        for devices in (1, 2) if repeat % 2 == 0 else (2, 1):
            runs[devices].append(fit(workdir, steps, devices, batch // devices, presets))
    single, double = runs[1][0]["state"], runs[2][0]["state"]
    diff = max(float((single[k].float() - double[k].float()).abs().max()) for k in single)
    agree = diff < 1e-5
    steps_of = {d: [steady(r["ends"], r["start"], steps // 5) for r in runs[d]] for d in runs}
    step_ms = {d: best_median_ms(steps_of[d]) for d in runs}
    wall = {d: sorted(r["wall"] for r in runs[d])[len(runs[d]) // 2] for d in runs}
    return [
        Row(
            f"DDP on CPU, global batch {batch}",
            "1 process",
            step_ms[1],
            "2 processes (gloo)",
            step_ms[2],
            "ms/step",
            goal="same weights",
            met=agree,
            repeats=median_ratios(steps_of[2], steps_of[1]),
            note=f"weights after {steps} steps: max |diff| {diff:.1e}; wall per run {wall[1]:.1f} s vs {wall[2]:.1f} s",
        )
    ]
