"""Fresh 2-process DDP fits with 2 persistent loader workers each, several at a time: how many hang as they start.

The measure behind the kit's choice for CPython gh-112275 (``kit/safety/worker_start.py``): on CPython before 3.10.15
and 3.11.10 a worker forked while a gloo thread creates its thread state hangs in ``os.fork()``. ``--start fork``
forks the workers as torch does by default (the kit's choice switched off in each run's processes, by a
``sitecustomize``), ``--start kit`` lets the kit choose (a fork server where a fork can hang). A run that has not
ended within ``--timeout`` seconds is counted as hung and killed.

    python bench/ddp_start.py --runs 120 --parallel 4 --start kit
    /tmp/venv-3.10.13/bin/python bench/ddp_start.py --runs 60 --start fork   # the project on PYTHONPATH

Not part of ``bench/run.py``: 120 runs take ~15 min on 2 cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from jsonargparse import CLI

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PACKAGE, TINY_PRESETS, config_flags

FORK = "import runkit.safety.worker_start as w\nw.fork_can_hang = lambda *args: False\n"
"""The ``sitecustomize`` of ``--start fork``: the kit's check says no fork can hang, so workers fork."""


def main(runs: int = 120, parallel: int = 4, timeout: float = 240.0, start: Literal["kit", "fork"] = "kit") -> str:
    """Starts ``runs`` fits, ``parallel`` at a time; prints one line per run and the count of hung ones.

    Args:
        runs: Fits to start.
        parallel: Fits at once (each is 2 processes with 2 workers each).
        timeout: Seconds after which a fit that has not ended counts as hung.
        start: ``kit``: the kit chooses how workers start; ``fork``: they fork, as torch does by default.
    """
    work = Path(tempfile.mkdtemp(prefix="ddp-start-"))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    if start == "fork":
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(FORK)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / "site"), env.get("PYTHONPATH")]))
    flags = [*config_flags(*TINY_PRESETS), "--trainer.devices=2", "--trainer.strategy=ddp"]
    flags += ["--trainer.accelerator=cpu", "--data.init_args.num_workers=2", "--data.init_args.persistent_workers=true"]
    pending, running, results = list(range(runs)), {}, {}
    while pending or running:
        while pending and len(running) < parallel:
            number = pending.pop(0)
            folder = work / f"run{number}"
            folder.mkdir()
            with open(folder / "out.log", "w") as log:
                command = [sys.executable, "-m", PACKAGE, "fit", *flags, f"--trainer.default_root_dir={folder}/runs"]
                process = subprocess.Popen(
                    command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            running[number] = (process, time.monotonic())
        time.sleep(0.5)
        for number, (process, began) in list(running.items()):
            if process.poll() is not None:
                results[number] = f"exit {process.returncode}, {time.monotonic() - began:.0f} s"
            elif time.monotonic() - began > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                results[number] = f"HUNG (killed after {timeout:.0f} s)"
            else:
                continue
            del running[number]
            print(f"run {number + 1}/{runs}: {results[number]}", flush=True)
    hung = sum(result.startswith("HUNG") for result in results.values())
    failed = sum(not result.startswith(("HUNG", "exit 0")) for result in results.values())
    version = ".".join(map(str, sys.version_info[:3]))
    line = f"Python {version}, start {start}: {runs} runs, {hung} hung, {failed} failed otherwise ({work})"
    print(line)
    return line


if __name__ == "__main__":
    CLI(main, as_positional=False)
