"""What a checkpoint save costs the training loop: background saves (the default) against saves in the loop.

A ``fit`` through runkit's command line of a module with ~450 MB of state (a 6144x6144 ``Linear`` and Adam: weights
151 MB, two Adam moments 302 MB) saves ``last.ckpt`` every 10 optimizer steps, with ``--last_checkpoint.background``
``true`` and ``false`` in alternated runs, each in a process of its own. The stall of a save is the gap between the
start of the batch that saved and the start of the next one, less the median gap of the batches that did not save
(the issue's measure); the row's value is each mode's median over its saves, and the goal is a background stall at
most a quarter of a synchronous one. The same on the loopback S3 (moto's server: ``$MOTO_SERVER``, else the
repository's ``.venv-moto``), and, with ``--large`` and more than 12 GiB of memory free, for ~4 GB of state
(an 18432x18432 ``Linear``). Each run's peak resident memory (``ru_maxrss``) is recorded: a background save holds
one snapshot of the state beside the model. The load average of the machine is in the notes.

    python bench/checkpoint_stall.py              # 0.5 GB: 2 runs of each mode on the local disk, 1 on loopback S3
    python bench/checkpoint_stall.py --large      # and 4 GB on the local disk, if the memory is there
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from common import Row
from object_storage import s3_server
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EVERY = 10  # optimizer steps between saves


class WideRegressor(pl.LightningModule):
    """One square ``Linear`` trained with Adam: state = 3 x width^2 float32 (weights and two moments)."""

    def __init__(self, width: int = 6144) -> None:
        """Args:
        width: The layer's input and output size.
        """
        super().__init__()
        self.net = nn.Linear(width, width)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.mse_loss(self.net(inputs), targets)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-4)


class NoiseData(pl.LightningDataModule):
    """Random inputs and targets of ``width`` features, made once."""

    def __init__(self, width: int = 6144, batch_size: int = 2, batches: int = 64) -> None:
        """Args:
        width: Features per sample.
        batch_size: Samples per batch.
        batches: Batches per epoch.
        """
        super().__init__()
        self.width, self.batch_size, self.batches = width, batch_size, batches

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(self.batch_size * self.batches, self.width, generator=generator)
        return DataLoader(TensorDataset(inputs, inputs.roll(1, dims=1)), batch_size=self.batch_size)


class BatchStarts(pl.Callback):
    """Writes the wall time at which every training batch started (and the fit's end) to ``output`` as JSON."""

    def __init__(self, output: str) -> None:
        """Args:
        output: The JSON file.
        """
        self.output, self.starts = output, []

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_train_end(self, *args: Any) -> None:
        Path(self.output).write_text(json.dumps({"starts": self.starts, "end": time.perf_counter()}))


def child(args: list[str]) -> None:
    """One fit through runkit's command line (``python checkpoint_stall.py child <fit args>``)."""
    import runkit

    runkit.main(["fit", *args], runkit.Project(program="checkpoint_stall", links={}))


def one_fit(workdir: Path, root: str, width: int, steps: int, background: bool) -> dict[str, Any]:
    """A fit in a process of its own: its batch start times, its peak resident memory (MiB), its wall time."""
    index = len(list(workdir.glob("starts-*.json"))) + 1
    starts = workdir / f"starts-{index}.json"
    config = workdir / "default.yaml"
    config.write_text("trainer:\n  accelerator: cpu\n  enable_progress_bar: false\n  logger: false\n")
    args = [
        "--model=checkpoint_stall.WideRegressor",
        f"--model.width={width}",
        "--data=checkpoint_stall.NoiseData",
        f"--data.width={width}",
        f"--trainer.default_root_dir={root}",
        "--run.experiment=stall",
        f"--run.name=run{index}",
        f"--trainer.max_steps={steps}",
        "--trainer.enable_model_summary=false",
        "--best_checkpoint=null",
        f"--last_checkpoint.every_n_train_steps={EVERY}",
        f"--last_checkpoint.background={str(background).lower()}",
        "--trainer.callbacks+=checkpoint_stall.BatchStarts",
        f"--trainer.callbacks.output={starts}",
    ]
    bench = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [bench, os.environ.get("PYTHONPATH")]))}
    env["KIT_DEFAULT_CONFIG"], env["PYTHONWARNINGS"] = str(config), "ignore"
    began = time.perf_counter()
    with open(workdir / f"out-{index}.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, "child", *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir
        )
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        sys.exit(f"error: a fit of the benchmark failed:\n{(workdir / f'out-{index}.log').read_text()[-3000:]}")
    record = json.loads(starts.read_text())
    return {**record, "peak_mib": usage.ru_maxrss / 1024, "wall_s": time.perf_counter() - began}


def stalls(record: dict[str, Any]) -> tuple[list[float], float]:
    """The stall of each save (its batch's gap less the median gap of the batches that did not save), and that
    median. Batch ``i`` (0-based) ends at global step ``i + 1``; the first batch (warm-up) is left out."""
    starts = [*record["starts"], record["end"]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    saving = [i for i in range(len(gaps)) if (i + 1) % EVERY == 0 and i + 1 < len(record["starts"])]
    plain = [gap for i, gap in enumerate(gaps) if i > 0 and (i + 1) % EVERY and i + 1 < len(record["starts"])]
    median = statistics.median(plain)
    return [gaps[i] - median for i in saving], median


def compare(label: str, workdir: Path, root: str, width: int, steps: int, repeats: int) -> list[Row]:
    found: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    load = [os.getloadavg()[0]]
    for repeat in range(repeats):
        for background in (True, False) if repeat % 2 == 0 else (False, True):
            found[background].append(one_fit(workdir, root, width, steps, background))
            load.append(os.getloadavg()[0])
    each = {mode: [stall for record in records for stall in stalls(record)[0]] for mode, records in found.items()}
    steps_s = {mode: statistics.median(stalls(record)[1] for record in records) for mode, records in found.items()}
    peak = {mode: max(record["peak_mib"] for record in records) for mode, records in found.items()}
    training = {mode: statistics.median(r["end"] - r["starts"][0] for r in records) for mode, records in found.items()}
    background, synchronous = statistics.median(each[True]), statistics.median(each[False])
    state_gb = 3 * 4 * (width * width + width) / 1e9
    note = (
        f"{state_gb:.2f} GB of state, a save every {EVERY} steps, {repeats} runs per mode alternated; stalls per save"
        f" (s) background {_listed(each[True])}, synchronous {_listed(each[False])}; median step"
        f" {steps_s[True]:.2f} s / {steps_s[False]:.2f} s; peak RSS {peak[True]:.0f} / {peak[False]:.0f} MiB;"
        f" load average {min(load):.1f} to {max(load):.1f}"
    )
    return [
        Row(
            comparison=f"Checkpoint stall per save, {label}",
            baseline="synchronous (--last_checkpoint.background false)",
            baseline_value=synchronous,
            candidate="background (default)",
            candidate_value=background,
            unit="s",
            goal="background <= 1/4 of synchronous",
            met=background <= synchronous / 4,
            note=note,
        ),
        Row(
            comparison=f"Training time of a run ({steps} steps, first batch to end), {label}",
            baseline="synchronous",
            baseline_value=training[False],
            candidate="background",
            candidate_value=training[True],
            unit="s",
            note="what the saves cost in all: a background save's writing and hashing share the CPU with the loop",
        ),
        Row(
            comparison=f"Peak resident memory of the fit, {label}",
            baseline="synchronous",
            baseline_value=peak[False],
            candidate="background",
            candidate_value=peak[True],
            unit="MiB",
            note="one snapshot of the state beside the model while a save is in flight",
        ),
    ]


def _listed(values: list[float]) -> str:
    return "[" + ", ".join(f"{value:.2f}" for value in values) + "]"


def run(tiny: bool, repeats: int, workdir: Path, large: bool = False, s3: bool = True) -> list[Row]:
    width, steps = (512, 2 * EVERY + 2) if tiny else (6144, 4 * EVERY + 2)
    runs = 1 if tiny else repeats
    rows = compare("local disk", workdir, str(workdir / "runs"), width, steps, runs)
    if s3:
        with s3_server():
            rows += compare("loopback S3 (moto)", workdir, "s3://bench/runs", width, steps, max(1, runs // 2))
    free_gib = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    if large and not tiny and free_gib > 12:
        rows += compare("local disk, 4 GB", workdir, str(workdir / "runs"), 18432, 2 * EVERY + 2, 1)
    elif large:
        print(f"checkpoint_stall: 4 GB left out: {free_gib:.1f} GiB of memory free (12 needed)", file=sys.stderr)
    return rows


if __name__ == "__main__":  # python bench/checkpoint_stall.py [--large] [--no-s3]: these rows alone
    if sys.argv[1:2] == ["child"]:
        child(sys.argv[2:])
        sys.exit(0)
    with tempfile.TemporaryDirectory(prefix="checkpoint-stall-") as folder:
        found = run(False, 2, Path(folder), large="--large" in sys.argv, s3="--no-s3" not in sys.argv)
    for row in found:
        print(json.dumps(row.__dict__))
