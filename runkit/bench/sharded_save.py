"""What a sharded save costs against a full state dict's, on 2 CPU processes (gloo) with FSDP2 under
``ModelParallelStrategy``: the kit's sharded save (temporary folder, digests, manifest, link committed), Lightning's
own (in place, nothing hashed) and the full state dict gathered on rank 0 through the kit's writer (``torch.save``
hashed as written, fsync, rename).

A module of ``--layers`` Linear layers ``--width`` wide, each ``fully_shard``-ed, and Adam (weights and two moments);
one optimizer step, then ``--saves`` saves of each kind, timed on every process around ``trainer.save_checkpoint``
(which ends in a barrier); the row's value is the median of rank 0's times. The load average is printed beside.

    python bench/sharded_save.py                    # 4 layers of 2048x2048: 201 MB of state
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.strategies import ModelParallelStrategy
from torch import nn

from runkit.safety.checkpoint_io import AtomicCheckpointIO
from runkit.safety.sharded_checkpoints import take_over


class Wide(BoringModel):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.layer = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)), nn.Linear(width, 2))
        self.width = width

    def configure_model(self) -> None:
        from torch.distributed.fsdp import fully_shard

        for layer in self.layer:
            fully_shard(layer, mesh=self.device_mesh["data_parallel"])
        fully_shard(self.layer, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(torch.randn(4, self.width)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def timed(trainer: pl.Trainer, folder: str, name: str, saves: int) -> list[float]:
    times = []
    for index in range(saves):
        start = time.perf_counter()
        trainer.save_checkpoint(os.path.join(folder, f"{name}-{index % 2}.ckpt"))  # replaces a save before it
        times.append(time.perf_counter() - start)
    return times


KINDS = ("kit sharded", "Lightning sharded", "full state dict")


def measure(kind: str, width: int, layers: int, saves: int, folder: str) -> None:
    """One kind, in this process and the one Lightning launches beside it; rank 0 prints its times."""
    sharded = kind != "full state dict"
    strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1, save_distributed_checkpoint=sharded)
    writer = AtomicCheckpointIO()
    writer.writing.append(lambda *record: None)  # a listener, as a run's record is: the file is hashed as written
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=strategy,
        plugins=[writer],
        max_steps=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Wide(width, layers))
    if kind == "kit sharded":
        take_over(trainer)
    times = timed(trainer, folder, kind.replace(" ", "-"), saves)
    if trainer.is_global_zero:
        print("TIMES", kind, *times, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--saves", type=int, default=5)
    parser.add_argument("--kind", choices=KINDS, default=None, help="one kind only (the others run it so)")
    args = parser.parse_args()
    sizes = ["--width", str(args.width), "--layers", str(args.layers), "--saves", str(args.saves)]
    if args.kind is not None:
        measure(args.kind, args.width, args.layers, args.saves, os.environ["BENCH_FOLDER"])
        return
    state = (args.layers * (args.width + 1) * args.width + 2 * (args.width + 1)) * 4 * 3 / 1e6
    print(f"{state:.0f} MB of state (weights and two Adam moments), {args.saves} saves of each kind")
    for kind in KINDS:
        with tempfile.TemporaryDirectory(prefix="sharded-save-") as folder:
            env = {**os.environ, "BENCH_FOLDER": folder, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
            done = subprocess.run(
                [sys.executable, __file__, *sizes, "--kind", kind], env=env, capture_output=True, text=True, check=True
            )
        times = [float(t) for t in done.stdout.split("TIMES", 1)[1].split()[len(kind.split()) :]]
        print(
            f"{kind:18s} median {statistics.median(times):.2f} s ({', '.join(f'{t:.2f}' for t in times)}),"
            f" load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
