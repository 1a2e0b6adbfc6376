"""The hyperparameter search on the default task, measured: what it finds, what pruning saves, what workers add.

    python bench/search.py                  # 12 trials a search, 2 workers (25 min on 2 quiet CPU cores)
    python bench/search.py --tiny true      # every step end to end on tiny data (a few minutes): no numbers

Runs ``configs/example/search.yaml`` (LR, weight decay, dropout, width; 3 epochs a trial) as a user would, each
command in its own process: first with TPE and no pruning (2 workers); then the same configurations again, queued
in that order, with the preset's median pruning (2 workers), and without pruning on 1 worker, so every side pays
for the same trials. Then ``fit`` of the default config with the trials' settings (3 epochs) and, at the
default's 10 epochs, the default config against the best preset. Prints one markdown table, the machine and the
load average (other work on the machine slows every side).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import torch
from common import CONFIGS, PACKAGE, TINY_PRESETS, Row, run_dir_flags
from common import report as bench_report
from jsonargparse import CLI

TINY = [
    *(f"--config={CONFIGS / name}.yaml" for name in TINY_PRESETS),
    "--run.experiment=default",
]
NO_PRUNING = "--pruner=optuna.pruners.NopPruner"


def main(trials: int = 12, workers: int = 2, single_trials: int = 12, full_epochs: int = 10, tiny: bool = False) -> str:
    """Runs the searches and fits, then prints the table.

    Args:
        trials: Trials of each 2-worker search (without and with pruning).
        workers: Worker processes of those searches.
        single_trials: Trials of the 1-worker search (the first configurations of the others), for its rate.
        full_epochs: Epochs of the final comparison, default config against the best preset (0: skip it).
        tiny: Tiny data and 3 trials: checks that every step runs, measures nothing.
    """
    if tiny:
        trials, single_trials, full_epochs = 3, 3, 2
    extra = TINY if tiny else []
    start, loads = time.perf_counter(), []
    with tempfile.TemporaryDirectory(prefix="bench-search-") as workdir:
        cwd = Path(workdir)
        space = [f"--config={CONFIGS / 'example' / 'search.yaml'}", *extra]
        unpruned = search(cwd, "unpruned", trials, *space, f"--workers={workers}", NO_PRUNING)
        loads.append(os.getloadavg()[1])
        chosen = [trial.params for trial in unpruned["study"].get_trials()]  # TPE's choices, in order
        pruned = search(cwd, "pruned", trials, *space, f"--workers={workers}", queue=chosen)
        loads.append(os.getloadavg()[1])
        single = search(cwd, "single", single_trials, *space, "--workers=1", NO_PRUNING, queue=chosen)
        loads.append(os.getloadavg()[1])
        search_dir = cwd / "runs" / "default" / "unpruned"
        default_short = fit(cwd, "default-short", f"--config={search_dir / 'base.yaml'}")
        best = unpruned["study"].best_trial
        settings = ", ".join(f"{key.split('.')[-1]}={_short(value)}" for key, value in best.params.items())
        rows = [
            Row(
                f"Search: best trial's val/acc, {'2' if tiny else '3'} epochs",
                "default config",
                default_short,
                f"best of {trials} (trial {best.number})",
                best.value,
                "",
                note=settings,
            )
        ]
        if full_epochs:
            epochs = f"--trainer.max_epochs={full_epochs}"
            default_full = fit(cwd, "default-full", *extra, epochs)
            best_full = fit(cwd, "best-full", f"--config={search_dir / 'best.yaml'}", epochs)
            title = f"Search: val/acc at {full_epochs} epochs"
            rows.append(Row(title, "default config", default_full, "best preset", best_full, ""))
            loads.append(os.getloadavg()[1])
        rows.append(
            Row(
                f"Search wall time, the same {trials} trials, {workers} workers",
                "no pruning",
                unpruned["seconds"],
                "median pruning",
                pruned["seconds"],
                "s",
                note=f"{pruned['pruned']} of {trials} trials pruned; best val/acc {pruned['study'].best_value:.4g}",
            )
        )
        rows.append(
            Row(
                "Search trials per hour, no pruning",
                "1 worker",
                3600 * single_trials / single["seconds"],
                f"{workers} workers",
                3600 * trials / unpruned["seconds"],
                "trials/h",
                note=f"{single_trials} and {trials} of the same trials; wall time includes the process start",
            )
        )
    load = ", ".join(f"{value:.1f}" for value in loads)
    report = bench_report(rows, start, tiny, f" Load average (5 min) after each step: {load}.")
    print(report)
    return report


def search(cwd: Path, name: str, trials: int, *args: str, queue: list[dict[str, object]] = ()) -> dict[str, object]:
    """Runs ``search *args --run.name=name --trials=trials`` in its own process, the first configurations of
    ``queue`` queued in order: its wall time, the study, and the trials pruned."""
    journal = cwd / "runs" / "default" / name / "study.log"
    journal.parent.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    queued = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    for params in queue[:trials]:
        queued.enqueue_trial(params)  # the search takes queued trials first
    began = time.perf_counter()
    # The flags after the configs, which may set `trials` too: the last value wins.
    output = run(cwd, name, "search", *args, f"--run.name={name}", f"--trials={trials}")
    print(output, file=sys.stderr)  # its progress lines and table
    seconds = time.perf_counter() - began
    study = optuna.load_study(study_name=name, storage=storage)
    pruned = sum(trial.state == optuna.trial.TrialState.PRUNED for trial in study.get_trials())
    print(f"bench: search {name}: {seconds:.0f} s, {pruned} pruned", file=sys.stderr)
    return {"seconds": seconds, "study": study, "pruned": pruned}


def fit(cwd: Path, name: str, *args: str) -> float:
    """Runs ``fit *args`` in its own process; its best val/acc."""
    run_dir = cwd / "runs" / "bench" / name
    run(cwd, name, "fit", *args, *run_dir_flags(run_dir))
    best = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    (state,) = [value for key, value in best["callbacks"].items() if "'monitor': 'val/acc'" in key]
    return float(state["best_model_score"])


def run(cwd: Path, name: str, *args: str) -> str:
    """Runs ``python -m <package> *args`` in ``cwd``; its output (also in ``cwd/<name>.log``)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    log = cwd / f"{name}.log"
    with open(log, "w") as out:
        command = [sys.executable, "-m", PACKAGE, *args]
        done = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{log.read_text()[-3000:]}")
    return log.read_text()


def _short(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    CLI(main)
