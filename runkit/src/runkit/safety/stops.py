"""The signals that stop a command, and the status each leaves in the run's record: one list, which the command's
handlers install (``signals.py``) and the DataLoader workers block (``worker_shield.py``, ``fork_server.py``), so a
signal added here is handled and shielded alike."""

from __future__ import annotations

import signal

STOPS: dict[int, str] = {
    signal.SIGTERM: "preempted",  # 143
    signal.SIGUSR1: "preempted",  # 138: SLURM's requeue signal
    signal.SIGHUP: "interrupted",  # 129
    signal.SIGINT: "interrupted",  # 130
}
"""The signals that stop a command, and the status each leaves in the run's provenance."""
