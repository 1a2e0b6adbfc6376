"""How cost grows with the work: the default run's step against batch size and network width; ``runs`` against runs.

Step times: the project's ``fit`` of each setting (CPU, the configured loader), the settings taken in turn,
three rounds; each fit gives its mean step (a logging step included in its share), each setting the best of
its fits, with their interquartile range. ``runs``: the records of one real ``fit`` of the tiny presets (its
``config.yaml``, ``hparams.yaml`` and ``provenance.yaml``, as the command line writes them) copied into 10, 100
and 1,000 run folders, and ``<package> runs`` timed in fresh processes.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alternate import robust_mean
from common import PACKAGE, TINY_PRESETS, Row, config_flags, fit_once, quartiles
from startup import command

BATCH_SIZES = (32, 64, 128, 256)
WIDTHS = ((8, 16), (16, 32), (32, 64), (64, 128))  # the default run's is (16, 32)
RUN_COUNTS = (10, 100, 1000)
RECORDS = ("config.yaml", "hparams.yaml", "provenance.yaml")  # a run folder's files besides checkpoints and events


def step_ms(workdir: Path, steps: int, warmup: int, *flags: str, presets: tuple[str, ...]) -> float:
    """The mean steady-state step (ms) of one ``fit``: per logging-period position, the median step."""
    built, timer, _ = fit_once(workdir, steps, *flags, presets=presets)
    durations = [b - a for a, b in zip([timer.start, *timer.ends[:-1]], timer.ends, strict=True)][warmup:]
    period = built.trainer.log_every_n_steps
    return 1e3 * robust_mean(durations[: len(durations) // period * period], period)


def step_rows(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    presets = TINY_PRESETS if tiny else ()
    steps, warmup = (4, 2) if tiny else (50, 10)
    batch_sizes, widths = (BATCH_SIZES[:1] + BATCH_SIZES[2:3], WIDTHS[-1:]) if tiny else (BATCH_SIZES, WIDTHS)
    settings = {f"batch {b}": (f"--data.init_args.batch_size={b}",) for b in batch_sizes}
    settings |= {f"width {list(w)}": (f"--model.network.init_args.widths=[{w[0]},{w[1]}]",) for w in widths}
    # Every batch size's steps within one epoch (tiny: its preset's 4 batches are lifted).
    size = ("--data.init_args.train_size=2048", "--trainer.limit_train_batches=1.0") if tiny else ()
    size += () if tiny else ("--data.init_args.train_size=20000",)
    times: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(1 if tiny else min(repeats, 3)):  # seven settings: three rounds are minutes
        for name, flags in settings.items():
            times[name].append(step_ms(workdir, steps, warmup, *flags, *size, presets=presets))
    default = min(times["batch 128"])
    rows = []
    for name, values in times.items():
        q1, _, q3 = quartiles(values)
        median = min(values)  # other work on the machine only adds time: the least disturbed fit stands for it
        batch = int(name.split()[1]) if name.startswith("batch") else 128
        rows.append(
            Row(
                f"Growth: default run's step, {name}" + ("" if name.startswith("batch") else ", batch 128"),
                "default run (batch 128, width [16, 32])",
                default,
                name,
                median,
                "ms",
                note=f"best of {len(values)} fits (IQR {q1:.1f}-{q3:.1f} ms); {1e3 * median / batch:.0f} us per sample",
            )
        )
    return rows


def real_run(workdir: Path) -> Path:
    """The folder of one ``<package> fit`` of the tiny presets, run as a user runs it (the records that the
    command line writes: an in-process ``fit`` writes no ``config.yaml`` or ``provenance.yaml``)."""
    root = Path(tempfile.mkdtemp(prefix="real-", dir=workdir))
    args = [*command(), "fit", *config_flags(*TINY_PRESETS), f"--trainer.default_root_dir={root}"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([*args, "--trainer.enable_progress_bar=false"], capture_output=True, text=True, env=env)
    folders = [path.parent for path in root.glob("*/*/provenance.yaml")]
    if done.returncode or len(folders) != 1:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return folders[0]


def children_cpu() -> float:
    """CPU time (user and system, s) of this process's ended child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def runs_rows(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    run_dir = real_run(workdir)
    root = Path(tempfile.mkdtemp(prefix="runs-", dir=workdir))
    rows, previous = [], 0
    seconds: dict[int, float] = {}
    for count in RUN_COUNTS[:1] if tiny else RUN_COUNTS:
        for index in range(previous, count):
            folder = root / "growth" / f"run-{index:04d}"
            folder.mkdir(parents=True)
            for name in RECORDS:
                shutil.copy(run_dir / name, folder / name)
        previous = count
        times, cpu = [], []
        for _ in range(1 if tiny else repeats):
            start, used = time.perf_counter(), children_cpu()
            done = subprocess.run([*command(), "runs", f"--root={root}"], capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            cpu.append(children_cpu() - used)  # what other work on the machine does not add to
            # Every run listed with its record read (its status), none skipped.
            if done.returncode or done.stdout.count(" finished ") != count:
                raise RuntimeError(f"runs over {count} runs failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        seconds[count] = statistics.median(times)
        q1, _, q3 = quartiles(times)
        rows.append(
            Row(
                f"Growth: `{PACKAGE} runs` over {count} runs",
                f"{RUN_COUNTS[0]} runs",
                seconds[RUN_COUNTS[0]],
                f"{count} runs",
                seconds[count],
                "s",
                note=f"IQR {q1:.2f}-{q3:.2f} s over {len(times)} fresh processes, load {os.getloadavg()[0]:.1f}; "
                f"CPU time {statistics.median(cpu):.2f} s; "
                f"{1e3 * (seconds[count] - seconds[RUN_COUNTS[0]]) / max(1, count - RUN_COUNTS[0]):.1f} ms per "
                f"run beyond {RUN_COUNTS[0]}",
            )
        )
    return rows


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    return [*step_rows(tiny, repeats, workdir), *runs_rows(tiny, repeats, workdir)]


if __name__ == "__main__":
    sys.exit("run through bench/run.py --only '[growth]'")
