"""Trackers: what each logger costs per training step of the default run, and what the ``mlflow`` extra costs at start.

Per step: one ``fit`` of the default run per tracker (its preset alone, ``configs/logger/<name>.yaml``), in this
process. After a warm-up, the fit alternates blocks of ``log_every_n_steps`` steps in which every call to the
loggers is made or dropped, in pairs whose order alternates (on-off, off-on, ...). Each block holds one logged
step, and the two blocks of a pair run seconds apart in the same process, so the machine's drift hits both. The
cost per step is the CPU time the tracker's calls take (timed inside them, on the training thread) plus that of
its background work (this process's other threads, where MLflow and TensorBoard write, and W&B's service process),
in the blocks where the calls are made minus those where they are dropped; as a share of the step's CPU time.
These fits use one torch thread and load data in this process, so CPU time counts work done, which other jobs on
a shared machine hardly change (two threads spin-waiting for each other would count waits). The whole-step
differences (CPU and wall, median and interquartile range over the pairs) are reported beside it: on a shared
machine their spread is wider than the 1 % goal. The epoch is made longer than the run, so no validation or
checkpoint falls in a block.

Start-up: ``<package> fit --help`` in fresh processes, alternating an environment with the ``mlflow`` extra
(mlflow-skinny) and the same environment without it (a folder of links to this one's site-packages minus mlflow).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from itertools import pairwise
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from common import PACKAGE, TINY_PRESETS, Row, build, markdown

TRACKERS = ("tensorboard", "csv", "mlflow", "mlflow server", "wandb")
GOAL = 0.01  # CSV and MLflow: at most 1 % of the default step
REPO = Path(__file__).resolve().parents[1]


class Alternation(pl.Callback):
    """Makes or drops every call to the loggers, in blocks of ``block`` steps after ``warmup`` steps; times blocks.

    A logged step's calls run after its ``on_train_batch_end``: a block's window runs from the end of its first
    step to the end of the step after its last, so it holds the calls of the block's steps and no other's.
    Timed per block: wall time, CPU time of this process (all its threads: MLflow logs in one) and of W&B's
    service process (``wandb-core``), and the time inside the calls.
    """

    def __init__(self, block: int, warmup: int) -> None:
        self.block, self.warmup = block, warmup
        self.on = True
        # Per step: wall time, CPU time (this process and W&B's service), CPU time of the loggers' background work
        # (this process's other threads: MLflow's and TensorBoard's writers; W&B's service).
        self.ends: list[tuple[float, float, float]] = []
        self.inside: dict[int, float] = {}  # block index: CPU seconds inside the loggers' calls
        self.services: list[Path] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for logger in trainer.loggers:
            for name in ("log_metrics", "save"):
                setattr(logger, name, self._switched(getattr(logger, name), trainer))

    def _switched(self, call: Callable[..., Any], trainer: pl.Trainer) -> Callable[..., Any]:
        def switched(*args: Any, **kwargs: Any) -> Any:
            if not trainer.training or trainer.global_step < self.warmup:
                return call(*args, **kwargs)  # the sanity check, the warm-up: as configured
            if not self.on:
                return None
            start = time.thread_time()  # CPU time of this thread: other jobs' turns on the CPU do not count
            result = call(*args, **kwargs)
            index = self.index(trainer.global_step - 1)  # the step whose calls these are
            self.inside[index] = self.inside.get(index, 0.0) + time.thread_time() - start
            return result

        return switched

    def index(self, step: int) -> int:
        return (step - self.warmup) // self.block

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        pair, second = divmod(self.index(trainer.global_step), 2)
        self.on = (pair % 2 == 0) != bool(second)  # on-off, off-on, on-off, ...

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        if self.services is None and trainer.global_step >= self.warmup:
            self.services = w_and_b_services()  # started by now, if the run logs to W&B
        service, others = cpu_seconds(self.services or []), cpu_seconds(other_threads())
        self.ends.append((time.perf_counter(), time.process_time() + service, service + others))

    def pairs(self) -> dict[str, list[float]]:
        """Per pair of blocks, per step (s): wall time and CPU time with calls dropped, and what making them adds
        to each; and the time inside the calls."""
        blocks = (len(self.ends) - self.warmup - 1) // self.block
        start = [self.ends[self.warmup + b * self.block] for b in range(blocks + 1)]
        wall = [b[0] - a[0] for a, b in pairwise(start)]
        cpu = [b[1] - a[1] for a, b in pairwise(start)]
        background = [b[2] - a[2] for a, b in pairwise(start)]
        found: dict[str, list[float]] = {"wall": [], "cpu": [], "wall_added": [], "cpu_added": [], "inside": []}
        found["background"] = []
        for pair in range(blocks // 2):
            on, off = (2 * pair, 2 * pair + 1) if pair % 2 == 0 else (2 * pair + 1, 2 * pair)
            found["wall"].append(wall[off] / self.block)
            found["cpu"].append(cpu[off] / self.block)
            found["wall_added"].append((wall[on] - wall[off]) / self.block)
            found["cpu_added"].append((cpu[on] - cpu[off]) / self.block)
            found["inside"].append(self.inside.get(on, 0.0) / self.block)
            found["background"].append((background[on] - background[off]) / self.block)
        return found


def w_and_b_services() -> list[Path]:
    """The ``/proc`` folders of W&B service processes this process started (none without W&B or ``/proc``)."""
    found = []
    for folder in Path("/proc").glob("[0-9]*"):
        with suppress(OSError, IndexError):
            ppid = int((folder / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and b"wandb-core" in (folder / "cmdline").read_bytes():
                found.append(folder)
    return found


def other_threads() -> list[Path]:
    """The ``/proc`` folders of this process's threads but the main one (the training runs there)."""
    main = threading.main_thread().native_id
    return [task for task in Path("/proc/self/task").glob("[0-9]*") if int(task.name) != main]


def cpu_seconds(processes: list[Path]) -> float:
    """User and system CPU seconds of ``processes`` (or threads) so far (``/proc/.../stat``; 0 for one gone)."""
    total = 0
    for folder in processes:
        with suppress(OSError, IndexError):
            fields = (folder / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
    return total / os.sysconf("SC_CLK_TCK")


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@contextmanager
def mlflow_server(workdir: Path) -> Iterator[str | None]:
    """An MLflow tracking server on a loopback port (``$MLFLOW_SERVER``, else ``.venv-mlflow``); ``None`` without."""
    command = os.environ.get("MLFLOW_SERVER") or str(REPO / ".venv-mlflow" / "bin" / "mlflow")
    if not Path(command).is_file():
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="mlflow-", dir=workdir))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [command, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    args += ["--gunicorn-opts", "--log-level warning", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"]
    args += ["--artifacts-destination", str(folder / "artifacts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        process.wait(30)


def tracker_fit(workdir: Path, name: str, pairs: int, tiny: bool) -> Alternation:
    """One fit of the default run logging to tracker ``name`` alone, alternating its calls; its ``Alternation``."""
    preset = "logger/mlflow" if name.startswith("mlflow") else f"logger/{name}"
    flags = ["--trainer.accelerator=cpu", "--trainer.num_sanity_val_steps=0", "--data.init_args.num_workers=0"]
    presets: tuple[str, ...] = (*TINY_PRESETS, preset) if tiny else (preset,)
    if tiny:
        flags += ["--trainer.log_every_n_steps=2", "--trainer.limit_train_batches=1.0", "--trainer.max_epochs=1"]
    probe = build(Path(tempfile.mkdtemp(prefix="probe-", dir=workdir)), *flags, presets=presets)
    block, batch = probe.trainer.log_every_n_steps, probe.config.data.init_args.batch_size
    warmup = 2 * block
    steps = warmup + 2 * pairs * block + 1  # the last block's window ends with the step after it
    # One epoch longer than the run: no validation or checkpoint inside a block.
    flags += [f"--trainer.max_steps={steps}", f"--data.init_args.train_size={(steps + 2) * batch}"]
    run_dir = Path(tempfile.mkdtemp(prefix=f"{name.replace(' ', '-')}-", dir=workdir)) / "exp" / "run"
    built = build(run_dir, *flags, presets=presets)
    alternation = Alternation(block, warmup)
    built.trainer.callbacks.append(alternation)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        built.trainer.fit(built.model, built.datamodule)
    finally:
        torch.set_num_threads(threads)
    return alternation


def step_rows(workdir: Path, pairs: int, tiny: bool) -> list[Row]:
    rows = []
    os.environ.setdefault("WANDB_SILENT", "true")
    for name in TRACKERS:
        if name == "mlflow server" and tiny:
            continue  # a server boots in ~10 s: the file store row checks the MLflow path end to end
        server = mlflow_server(workdir) if name == "mlflow server" else nullcontext(None)
        with server as url:
            if name == "mlflow server" and url is None:
                continue  # no server environment: the file store row stands for MLflow
            os.environ.pop("MLFLOW_TRACKING_URI", None)
            if url is not None:  # the preset's tracking_uri is null: MLflow's variable names the server
                os.environ["MLFLOW_TRACKING_URI"] = url
            alternation = tracker_fit(workdir, name, pairs, tiny)
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        found = alternation.pairs()
        wall, cpu = statistics.median(found["wall"]), statistics.median(found["cpu"])
        w1, wall_added, w3 = quartiles(found["wall_added"])
        c1, cpu_added, c3 = quartiles(found["cpu_added"])
        i1, inside, i3 = quartiles(found["inside"])
        background = statistics.fmean(found["background"])  # ticks of 10 ms: the mean over all pairs resolves it
        cost = inside + max(background, 0.0)
        where = {"mlflow": " (local file store)", "mlflow server": " (a local server, SQLite store)"}.get(name, "")
        goal = name in ("csv", "mlflow", "mlflow server")
        rows.append(
            Row(
                f"Tracker cost per step: {name.split()[0]}{where}",
                "step's CPU time",
                1e3 * cpu,
                "its calls and background work",
                1e3 * cost,
                "ms",
                goal=f"<= {GOAL:.2f}x" if goal else "",
                met=cost <= GOAL * cpu if goal else None,
                note=f"inside the calls {1e3 * inside:.3f} ms/step (IQR {1e3 * i1:.3f} to {1e3 * i3:.3f}), background "
                f"{1e3 * background:+.3f} ms/step; whole steps, calls made minus dropped: CPU {1e3 * cpu_added:+.2f} "
                f"ms/step (IQR {1e3 * c1:+.2f} to {1e3 * c3:+.2f}), wall {1e3 * wall_added:+.2f} ms/step (IQR "
                f"{1e3 * w1:+.2f} to {1e3 * w3:+.2f}) of a {1e3 * wall:.1f} ms step; {len(found['wall'])} pairs of "
                f"{alternation.block}-step blocks, one logged step each; 1 torch thread"
                + (f"; W&B service processes timed: {len(alternation.services or [])}" if name == "wandb" else ""),
            )
        )
        print(f"bench: trackers: {markdown(rows[-1:]).splitlines()[-1]}", file=sys.stderr, flush=True)
    return rows


def links_to_site_packages(folder: Path, hide: tuple[str, ...]) -> Path:
    """A folder of links to every entry of this environment's site-packages except those starting with ``hide``."""
    folder.mkdir(parents=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(hide):
            (folder / entry.name).symlink_to(entry)
    return folder


def help_seconds(packages: Path) -> float:
    """Wall time of ``<package> fit --help`` in a fresh interpreter whose site-packages is ``packages``."""
    script = (
        f"import runpy, site, sys; site.addsitedir({str(packages)!r}); sys.argv = [{PACKAGE!r}, 'fit', '--help'];"
        f" runpy.run_module({PACKAGE!r}, run_name='__main__')"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-S", "-c", script], check=True, capture_output=True, env={
        **os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    return time.perf_counter() - start


def startup_row(workdir: Path, repeats: int) -> Row:
    both = {
        "with": links_to_site_packages(workdir / "site-with", ()),
        "without": links_to_site_packages(workdir / "site-without", ("mlflow", "mlflow_skinny")),
    }
    times: dict[str, list[float]] = {"with": [], "without": []}
    for repeat in range(repeats):
        for side in ("with", "without") if repeat % 2 == 0 else ("without", "with"):
            times[side].append(help_seconds(both[side]))
    difference = [a - b for a, b in zip(times["with"], times["without"], strict=True)]
    q1, median, q3 = quartiles(difference)
    for folder in both.values():
        shutil.rmtree(folder)
    return Row(
        f"Start-up, {PACKAGE} fit --help",
        "without the mlflow extra",
        statistics.median(times["without"]),
        "with it (mlflow-skinny)",
        statistics.median(times["with"]),
        "s",
        note=f"paired difference {median:+.3f} s, IQR {q1:+.3f} to {q3:+.3f} s, over {repeats} alternated pairs of "
        "fresh processes; nothing imports mlflow before a run logs to it",
    )


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    pairs = 2 if tiny else 2 * repeats + 2  # 12 pairs of blocks by default: 260 steps a tracker
    rows = step_rows(workdir, pairs, tiny)
    rows.append(startup_row(workdir, 1 if tiny else 2 * repeats))
    return rows


if __name__ == "__main__":  # python bench/trackers.py: these rows alone
    from common import report

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        print(report(run(tiny="--tiny" in sys.argv, repeats=5, workdir=Path(folder)), began, "--tiny" in sys.argv))
