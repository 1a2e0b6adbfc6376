"""How DataLoader workers start under DDP: from a fork server on Pythons whose ``fork()`` can hang the child.

CPython before 3.10.15 and 3.11.10 (Debian 12's 3.11.2 among them) can hang a child inside ``os.fork()`` when
another thread of the parent is creating its Python thread state at that instant: the child waits for the runtime's
thread-list lock that the other thread held (CPython gh-112275). Under DDP gloo's threads do so after every
collective, so a worker forked by a rank could hang as it started, and the run with it (1 of the first 12 fresh
2-process runs with persistent workers, measured here).

On those Pythons, under DDP, the kit gives each loader with workers and no start method of its own
``multiprocessing_context="forkserver"`` (the default from Python 3.14): each rank starts one server process by
``exec``, single-threaded, and the server forks the workers, so no thread of the rank can hold the lock at a fork.
Nothing of the interpreter is read or patched, and other forks are left alone. The server, and ``multiprocessing``'s
resource tracker beside it, are started with the stop signals blocked and keep them so; the workers the server forks
are shielded from birth as forked workers are (``fork_server.py``, ``worker_shield.py``). Everywhere else workers
fork, as torch's default does.

What a loader needs for it: its dataset, ``collate_fn`` and ``worker_init_fn`` pickle (they are sent to the
server), as with the ``spawn`` start method on macOS and Windows. The server imports their modules before it forks
any worker (``preloaded``): else each worker imports them again when it unpickles its dataset (the task's module, and
Lightning with it), which costs every epoch of non-persistent workers 1.05 s against 0.035 s (2 workers, the kit
tests' task, 2-core Intel Xeon). Importing them starts no thread that runs Python in the server.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from multiprocessing import forkserver, resource_tracker
from multiprocessing.context import BaseContext
from typing import Any

from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader, Dataset

from .worker_shield import SHIELDED

FIXED_IN = {(3, 10): 15, (3, 11): 10}
"""The first patch release of each minor version with CPython's fix for gh-112275; minors not named have it."""
SHIELD_MODULE = f"{__package__}.fork_server"
"""What the fork server imports first: it shields every worker the server forks (``fork_server.py``)."""
UNLOADABLE = ("__main__", "builtins")
"""Modules a server cannot import by name (the parent's script) or has already."""


def fork_can_hang(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this CPython can hang a child forked while another thread creates its thread state (gh-112275)."""
    minor = tuple(version[:2])
    return sys.implementation.name == "cpython" and minor in FIXED_IN and version[2] < FIXED_IN[minor]


def start_safely(loaders: Any, world_size: int) -> Any:
    """``loaders`` (one, or Lightning's collections of them), each with workers started from the fork server when
    ``world_size`` processes train and this Python's fork can hang; a loader that names a start method keeps it."""
    if world_size < 2 or not fork_can_hang() or not sys.platform.startswith("linux"):
        return loaders
    flattened = (loaders if isinstance(loaders, CombinedLoader) else CombinedLoader(loaders)).flattened
    started = [
        loader
        for loader in flattened
        if isinstance(loader, DataLoader) and loader.num_workers > 0 and loader.multiprocessing_context is None
    ]
    if started:
        context = fork_server(tuple(preloaded(started)))
        for loader in started:
            loader.multiprocessing_context = context
    return loaders


def preloaded(loaders: list[DataLoader]) -> list[str]:
    """The modules of what ``loaders`` send their workers: each dataset's class and those of the datasets it wraps
    (``.dataset``, ``.datasets``: ``Subset``, ``ConcatDataset``, the kit's seeding), ``collate_fn``, ``worker_init_fn``.
    """
    found: list[object] = []
    for loader in loaders:
        pending, seen = [loader.dataset], set()
        while pending:
            dataset = pending.pop()
            if id(dataset) in seen:
                continue
            seen.add(id(dataset))
            found.append(type(dataset))
            inner, many = getattr(dataset, "dataset", None), getattr(dataset, "datasets", None)
            pending += [inner] if isinstance(inner, Dataset) else []
            pending += [each for each in many if isinstance(each, Dataset)] if isinstance(many, list | tuple) else []
        found += [loader.collate_fn, loader.worker_init_fn]
    modules = (getattr(item, "__module__", None) for item in found if item is not None)
    return list(dict.fromkeys(name for name in modules if isinstance(name, str) and name not in UNLOADABLE))


def fork_server(modules: tuple[str, ...] = ()) -> BaseContext:
    """The ``forkserver`` context, its server running: started with the stop signals blocked, which it inherits.
    The server imports torch and ``modules`` once (a server already running keeps what it imported)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([SHIELD_MODULE, "torch", *modules])  # once in the server, not in every worker
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)  # a signal meanwhile arrives once unblocked
    try:
        # The resource tracker too (it tracks the workers' queues): killed by the job's SIGUSR1 or SIGHUP, it would
        # come back knowing none of them. Starting it unblocks SIGINT and SIGTERM, which it blocks around that.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return context
