"""DataLoader workers outlive a stop signal sent to the whole job, so the run can stop where its state is whole.

``scancel``, SLURM's preemption and a terminal's Ctrl-C or hangup signal every process of the job, DataLoader
workers included. A worker dies of it at once (torch's worker handler re-raises SIGTERM; SIGINT ends its loop),
and torch's SIGCHLD handler then raises ``RuntimeError: DataLoader worker (pid N) is killed by signal`` in the
main process, wherever it is: in the middle of a backward pass, before anything is saved.

While ``shielding()`` is active, every process forked from this one (what torch's default ``fork`` start method
makes of a DataLoader worker) starts with the stop signals blocked, before any of its own code runs, and a
thread of the worker takes them: SIGTERM from its parent (torch's way of ending a worker) still ends it, and
signals from anyone else are dropped. The main process decides when to stop; its loaders then end their workers
as usual. Workers that the kit starts from a fork server (under DDP on some Pythons: ``worker_start.py``) are
shielded the same way (``fork_server.py``); those a loader starts with ``spawn`` or its own ``forkserver`` are not.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .stops import STOPS

SHIELDED = tuple(STOPS)  # the stop signals (stops.py): a worker outlives each of them

_active = 0  # shielding() blocks entered in this process
_forking: list[int] = []  # the parent's pid, set just before a fork


@contextmanager
def shielding() -> Iterator[None]:
    """Within the block, processes forked from this one ignore the stop signals that others send them."""
    global _active
    _active += 1
    try:
        yield
    finally:
        _active -= 1


def _before_fork() -> None:
    if _active:
        _forking[:] = [os.getpid()]
        signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)  # inherited by the child: no unguarded moment


def _after_fork_in_parent() -> None:
    if _forking:
        _forking.clear()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SHIELDED)  # what arrived meanwhile is delivered now


def _after_fork_in_child() -> None:
    global _active
    if not _forking:
        return
    parent = _forking.pop()
    _active = 0  # the child's own children are not shielded
    threading.Thread(target=take_signals, args=(parent,), name="stop-signal-shield", daemon=True).start()


def take_signals(owner: int) -> None:
    """Runs in a shielded worker: the blocked signals arrive here, one at a time; SIGTERM from ``owner`` ends it."""
    while True:
        received = signal.sigwaitinfo(SHIELDED)
        if received.si_signo == signal.SIGTERM and received.si_pid == owner:
            os._exit(0)  # the owner ends its worker: torch's worker handler does the same


if hasattr(os, "register_at_fork") and hasattr(signal, "sigwaitinfo"):  # POSIX; elsewhere nothing is shielded
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
