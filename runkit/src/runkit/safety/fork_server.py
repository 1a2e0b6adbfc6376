"""Imported by the fork server that starts DataLoader workers under DDP (``worker_start.py``), and by nothing else.

The server was started with the stop signals blocked (a process keeps its signal mask across ``exec``): a signal
sent to the whole job does not end it, and every worker it forks is born with them blocked. Here each such worker
gets the thread that takes them (``worker_shield.take_signals``): SIGTERM from the rank that owns the server ends it,
as torch ends a worker; the rest are dropped. The server ends with its rank (``multiprocessing`` closes its pipe).
"""

from __future__ import annotations

import os
import threading

from .worker_shield import take_signals

OWNER = os.getppid()
"""The rank that started this server (and so its workers' loaders)."""


def _after_fork_in_child() -> None:
    threading.Thread(target=take_signals, args=(OWNER,), name="stop-signal-shield", daemon=True).start()


os.register_at_fork(after_in_child=_after_fork_in_child)
