"""What every benchmark shares: the baked project's package, runs built from its configs, step timing, result rows.

The benchmarks measure the kit in a project baked from this template and installed in this environment
(``make bench`` bakes the default one): ``$BENCH_PROJECT``, else ``build/image-classifier``.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import lightning.pytorch as pl
import torch

ROOT = Path(os.environ.get("BENCH_PROJECT") or Path(__file__).resolve().parents[2] / "build" / "image-classifier")
CONFIGS = ROOT / "configs"
TINY_PRESETS = ("debug/tiny", "example/small_data")  # tiny mode: a few batches of 256 images, seconds
if not (ROOT / "src").is_dir():
    sys.exit(f"error: no baked project at {ROOT}: run `make bench`, or set BENCH_PROJECT to a baked project")
(PACKAGE,) = [path.name for path in (ROOT / "src").iterdir() if (path / "__init__.py").is_file()]


def project(module: str) -> ModuleType:
    """A submodule of this project's package, e.g. ``importlib.import_module("runkit.safety.checkpoints")``."""
    return importlib.import_module(f"{PACKAGE}.{module}")


def config_flags(*presets: str) -> list[str]:
    """``--config`` flags for ``presets``, named by their path under ``configs/`` (``default.yaml`` always applies)."""
    return [f"--config={CONFIGS / f'{name}.yaml'}" for name in presets]


def run_dir_flags(run_dir: Path | str) -> list[str]:
    """Flags that make a run write exactly into ``run_dir``, read as ``<default_root_dir>/<experiment>/<name>``."""
    run_dir = Path(run_dir)
    return [
        f"--trainer.default_root_dir={run_dir.parent.parent}",
        f"--run.experiment={run_dir.parent.name}",
        f"--run.name={run_dir.name}",
    ]


def build(run_dir: Path, *flags: str, presets: tuple[str, ...] = ()) -> Any:
    """The CLI's objects (``.trainer``, ``.model``, ``.datamodule``) for a ``fit`` of the configs, not run.

    Seeds exactly as ``fit`` does (before the model is built), so two builds start from the same weights.
    """
    args = [
        *config_flags(*presets),
        "--trainer.enable_progress_bar=false",
        *run_dir_flags(run_dir),
    ]
    return project("cli").build_cli([*args, *flags], run=False)


class StepTimer(pl.Callback):
    """Records the wall time at the end of every training batch, and the batch's loss.

    Intervals between consecutive ends are whole steps (data, forward, backward, optimizer, hooks, logging).
    With ``output``, rank zero writes the record there as JSON at the end of training (for subprocess runs).
    """

    def __init__(self, output: str | None = None) -> None:
        """Args:
        output: JSON file for the record; ``None`` keeps it on the callback only.
        """
        self.output = output
        self.start = 0.0
        self.ends: list[float] = []
        self.losses: list[float] = []

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.ends.append(time.perf_counter())
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.output is not None and trainer.is_global_zero:
            record = {"start": self.start, "ends": self.ends, "losses": self.losses}
            Path(self.output).write_text(json.dumps(record))
            torch.save(pl_module.state_dict(), Path(self.output).with_suffix(".pt"))


def fit_once(
    workdir: Path, steps: int, *flags: str, presets: tuple[str, ...] = (), data: Any = None, without: type | None = None
) -> tuple[Any, StepTimer, Path]:
    """A whole CPU ``fit`` of ``steps`` optimizer steps: the built objects, its step record and its run folder.

    ``data``, if given, wraps the configured datamodule (``data(datamodule)``) before fitting; ``without``
    takes a callback class out of the always-on ones (the side of a row that measures what it costs).
    """
    run_dir = Path(tempfile.mkdtemp(prefix="fit-", dir=workdir))
    built = build(run_dir, f"--trainer.max_steps={steps}", "--trainer.accelerator=cpu", *flags, presets=presets)
    if without is not None:
        built.trainer.callbacks[:] = [c for c in built.trainer.callbacks if not isinstance(c, without)]
    timer = StepTimer()
    built.trainer.callbacks.append(timer)
    built.trainer.fit(built.model, built.datamodule if data is None else data(built.datamodule))
    return built, timer, run_dir


def timed_fit(
    workdir: Path, steps: int, *flags: str, presets: tuple[str, ...] = (), data: Any = None
) -> tuple[float, StepTimer]:
    """Wall time of a whole CPU ``fit`` (``fit_once``), setup included, and its step record."""
    start = time.perf_counter()
    _, timer, _ = fit_once(workdir, steps, *flags, presets=presets, data=data)
    return time.perf_counter() - start, timer


def steady(ends: list[float], start: float, warmup: int) -> list[float]:
    """Step durations (s) after the first ``warmup`` steps; the first step is timed from ``start``."""
    times = [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]
    return times[warmup:] if len(times) > warmup else times[-1:]


def median_ms(durations: list[float]) -> float:
    return 1e3 * statistics.median(durations)


def best_median_ms(runs: list[list[float]]) -> float:
    """The lowest of the runs' median step times (ms).

    Other work on the machine only ever adds time, and it comes in bursts longer than a step: the run it
    disturbed least is the best estimate of each side, so a busy machine still gives comparable numbers.
    """
    return min(median_ms(durations) for durations in runs)


@dataclass
class Row:
    """One comparison: ``candidate`` against ``baseline``.

    ``repeats`` holds one value per paired repeat: candidate / baseline ratios, or, with ``difference`` set
    to their unit, candidate - baseline differences. The table shows their median and interquartile range;
    without them, the ratio of the two values and no spread.
    """

    comparison: str
    baseline: str
    baseline_value: float
    candidate: str
    candidate_value: float
    unit: str
    goal: str = ""
    met: bool | str | None = None
    note: str = ""
    repeats: list[float] | None = None
    difference: str = ""

    @property
    def ratio(self) -> float:
        if self.repeats and not self.difference:
            return statistics.median(self.repeats)
        return self.candidate_value / self.baseline_value if self.baseline_value else float("nan")

    def shown(self) -> str:
        """The ratio column: the median ratio, or the median difference."""
        if self.difference and self.repeats:
            return f"{statistics.median(self.repeats):+.3f} {self.difference}"
        return f"{self.ratio:.3f}x"

    def spread(self) -> str:
        """The spread column: the interquartile range over paired repeats, and their number."""
        if not self.repeats or len(self.repeats) < 2:
            return ""
        q1, _, q3 = quartiles(self.repeats)
        if self.difference:
            return f"{q1:+.3f} to {q3:+.3f} {self.difference} (n={len(self.repeats)})"
        return f"{q1:.3f}-{q3:.3f}x (n={len(self.repeats)})"


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """First quartile, median and third quartile (of one value: itself three times)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def judge(repeats: list[float], limit: float) -> str:
    """``yes`` when the whole interquartile range is within ``<= limit``, ``no`` when all of it is above, else
    ``unsettled``: the spread is too wide to say."""
    q1, _, q3 = quartiles(repeats)
    return "yes" if q3 <= limit else "no" if q1 > limit else "unsettled"


def paired_ratios(candidate: list[float], baseline: list[float]) -> list[float]:
    """Ratios of two sides' values taken in alternation, repeat by repeat."""
    return [c / b for c, b in zip(candidate, baseline, strict=True)]


def median_ratios(candidate: list[list[float]], baseline: list[list[float]]) -> list[float]:
    """Per pair of alternated runs, the ratio of their median steps."""
    medians = {side: [statistics.median(run) for run in runs] for side, runs in (("c", candidate), ("b", baseline))}
    return paired_ratios(medians["c"], medians["b"])


def markdown(rows: list[Row]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| comparison | baseline | candidate | ratio (median) | spread (IQR of paired repeats) | goal | met | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        met = "" if row.met is None else row.met if isinstance(row.met, str) else "yes" if row.met else "no"
        met = f"**{met}**" if met in ("no", "unsettled") else met
        lines.append(
            f"| {row.comparison} | {row.baseline}: {row.baseline_value:.4g} {row.unit} "
            f"| {row.candidate}: {row.candidate_value:.4g} {row.unit} | {row.shown()} | {row.spread()} | {row.goal} "
            f"| {met} | {row.note} |"
        )
    return "\n".join(lines)


def report(rows: list[Row], start: float, tiny: bool, about_machine: str = "") -> str:
    """The table, the machine, and the command that made it with its wall time since ``start``."""
    command = " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    seconds = f"{time.perf_counter() - start:.0f} s{', tiny: not a measurement' if tiny else ''}"
    return "\n".join(
        [markdown(rows), "", f"Machine: {machine()}.{about_machine}", f"Command: `{command}` ({seconds})."]
    )


def machine() -> str:
    """One line describing the machine and the software stack."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    load = f", load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    return (
        f"{cpu}, {cores} cores usable{load}; {gpu}; Python {platform.python_version()}, torch {torch.__version__}, "
        f"lightning {pl.__version__}, {torch.get_num_threads()} torch threads, {platform.system()} {platform.release()}"
    )
