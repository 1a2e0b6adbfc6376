"""The search's worker processes: started fresh (spawn), a CPU share and a GPU share each, stopped together on a stop
or a failure.

On a machine with GPUs each worker gets its own (``CUDA_VISIBLE_DEVICES`` in its environment from its start, before
torch reads it): never two workers on one GPU. A trial trains in one process, so a worker uses the first of its GPUs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable

from ..safety.signals import PREEMPTED_EXIT_CODE
from .worker import Plan, spawned_worker

GPUS_ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpus(accelerator: object) -> list[str]:
    """The GPUs the workers share out: those CUDA makes visible to this process, unless the config trains on
    another accelerator (``cpu``, ``mps``, ...). Asks NVML only: no CUDA context in the process that spawns."""
    if str(accelerator) not in ("auto", "gpu", "cuda") and not str(accelerator).endswith("CUDAAccelerator"):
        return []
    import torch

    count = torch.cuda.device_count()
    given = os.environ.get(GPUS_ENV)
    names = [name.strip() for name in given.split(",") if name.strip()] if given else [str(i) for i in range(count)]
    return names[:count]


def gpu_shares(gpus: list[str], workers: int) -> list[list[str]]:
    """Each worker's own GPUs: ``gpus`` split into ``workers`` equal shares (the rest unused); ``[]`` each without
    GPUs. Raises ``ValueError`` when there are fewer GPUs than workers: two workers never share one."""
    if not gpus:
        return [[] for _ in range(workers)]
    if workers > len(gpus):
        raise ValueError(
            f"--workers {workers}: this machine shows {len(gpus)} GPU(s) ({GPUS_ENV}={','.join(gpus)}), and two"
            f" workers never share one: give --workers {len(gpus)} or fewer (or --trainer.accelerator cpu)"
        )
    each = len(gpus) // workers
    return [gpus[i * each : (i + 1) * each] for i in range(workers)]


def run_workers(plan: Plan, workers: int, gpus: list[str] | None = None) -> int:
    """Starts ``workers`` worker processes and waits for them; Ctrl-C and SIGTERM stop them gracefully (SIGTERM).

    ``gpus``: the GPUs to share out among them (``visible_gpus``; checked with ``gpu_shares`` beforehand)."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or CUDA state forked
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    shares = [cpus[len(cpus) * i // workers : len(cpus) * (i + 1) // workers] for i in range(workers)]
    devices = gpu_shares(gpus or [], workers)
    processes = [
        context.Process(target=spawned_worker, args=(plan, share), name=f"worker-{i}") for i, share in enumerate(shares)
    ]
    given = os.environ.get(GPUS_ENV)
    try:
        for process, share in zip(processes, devices, strict=True):
            if share:  # a spawned process starts with this process's environment as it is at start()
                os.environ[GPUS_ENV] = ",".join(share)
            process.start()
    finally:
        if given is None:
            os.environ.pop(GPUS_ENV, None)
        else:
            os.environ[GPUS_ENV] = given

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
