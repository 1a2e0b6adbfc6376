"""The search's worker processes: started fresh (spawn), a CPU share each, stopped together on a stop or a failure."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable

from ..safety.signals import PREEMPTED_EXIT_CODE
from .worker import Plan, spawned_worker


def run_workers(plan: Plan, workers: int) -> int:
    """Starts ``workers`` worker processes and waits for them; Ctrl-C and SIGTERM stop them gracefully (SIGTERM)."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or CUDA state forked
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    shares = [cpus[len(cpus) * i // workers : len(cpus) * (i + 1) // workers] for i in range(workers)]
    processes = [
        context.Process(target=spawned_worker, args=(plan, share), name=f"worker-{i}") for i, share in enumerate(shares)
    ]
    for process in processes:
        process.start()

    def stop(signum: int = signal.SIGTERM, frame: object = None) -> None:
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: each saves its running trial and exits 143

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        codes = wait_for_workers(processes, stop)
    except KeyboardInterrupt:
        stop()
        for process in processes:
            process.join()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if any(code in (1, 2) for code in codes):
        return next(code for code in codes if code in (1, 2))
    if PREEMPTED_EXIT_CODE in codes:
        return PREEMPTED_EXIT_CODE
    return 0


def wait_for_workers(processes: list[multiprocessing.process.BaseProcess], stop: Callable[[], None]) -> list[int]:
    """Waits for every worker (reaping each at once, so its trial is seen to be dead); a failing worker stops all."""
    from multiprocessing.connection import wait

    running = list(processes)
    while running:
        for sentinel in wait([process.sentinel for process in running]):
            process = next(p for p in running if p.sentinel == sentinel)
            process.join()
            running.remove(process)
            if process.exitcode in (1, 2):
                stop()
            elif process.exitcode and process.exitcode < 0:
                print(
                    f"search: worker {process.name} died ({signal.Signals(-process.exitcode).name});"
                    " its trial is run again by another worker or when the search runs again",
                    flush=True,
                )
    return [process.exitcode or 0 for process in processes]
