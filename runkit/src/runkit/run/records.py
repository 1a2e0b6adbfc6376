"""A run's ``provenance.yaml`` read back: the record, or why it is not one (edited by hand, damaged, another file).

A record that is not shaped as ``provenance.RunRecord`` writes it is named once on stderr and treated as absent by
its readers (``runs``, ``--ckpt_path best|last``); ``RunRecord`` refuses to write over it.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import yaml

FILE = "provenance.yaml"
# libyaml's parser where PyYAML was built with it (its wheels are): ~10x faster than the pure-Python one, whose
# parsing was most of `runs`'s time over many runs. Both build the same values (one constructor and resolver).
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STATUSES = {
    "finished": "ran to the end (max_epochs, max_steps or early stopping)",
    "preempted": "stopped by SIGTERM or SIGUSR1 (exit 143, 138); last.ckpt saved, resumable; see `signal`",
    "interrupted": "stopped by Ctrl-C or SIGHUP (exit 130, 129); last.ckpt saved, resumable; see `signal`",
    "nonfinite": "stopped on a non-finite loss or weights (exit 1); no checkpoint holds them",
    "failed": "stopped by an error (exit 1 or 2); see `error`",
    "killed": "no end recorded: the process was killed",
}


def read_record(run: Path) -> dict[str, Any] | None:
    """The run's ``provenance.yaml``, or ``None`` if it has none or one that is not a record (said once, on stderr)."""
    record, problem = _load_record(run)
    if problem is not None and (run / FILE).absolute() not in _REPORTED:
        _REPORTED.add((run / FILE).absolute())
        print(f"warning: {run / FILE}: not a provenance record ({problem}); skipped", file=sys.stderr, flush=True)
    return record


def record_problem(run: Path) -> str | None:
    """Why the run's ``provenance.yaml`` is not a record (``None``: it is one, or there is none)."""
    return _load_record(run)[1]


_REPORTED: set[Path] = set()  # malformed records already named by this process


def _load_record(run: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        record = yaml.load((run / FILE).read_text(), Loader=LOADER)
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as error:
        return None, f"unreadable: {error}"
    except yaml.YAMLError:
        return None, "not YAML"
    problem = _shape_problem(record)
    return (record, None) if problem is None else (None, problem)


def _shape_problem(record: object) -> str | None:
    """What in ``record`` is not shaped as ``RunRecord`` writes it: the values the readers of a record rely on, and
    at least one session with its start (a YAML file without one, a copied config say, is not a run's record)."""

    def kind(value: object) -> str:
        return type(value).__name__

    if not isinstance(record, dict):
        return f"expected a mapping, got {kind(record)}"
    sessions, progress = record.get("sessions") or [], record.get("progress") or {}
    if not isinstance(sessions, list):
        return f"sessions: expected a list, got {kind(sessions)}"
    for index, session in enumerate(sessions):
        if not isinstance(session, dict):
            return f"sessions[{index}]: expected a mapping, got {kind(session)}"
        if not all(isinstance(session.get(key), (str, type(None))) for key in ("started", "status", "host")):
            return f"sessions[{index}]: started, status and host must be text"
        if session.get("started") is None:
            return f"sessions[{index}]: no start time"
    if not isinstance(progress, dict):
        return f"progress: expected a mapping, got {kind(progress)}"
    best = progress.get("best")
    if best is not None and not (
        isinstance(best, dict) and isinstance(best.get("monitor"), str) and isinstance(best.get("value"), (int, float))
    ):
        return "progress.best: expected monitor and value"
    if not sessions:  # `fit` writes its record once a session has started: a mapping without one is another file
        return "no sessions"
    return None


def session_status(record: dict[str, Any]) -> str:
    """How the newest session ended: a ``STATUSES`` key, or ``running`` while its process is alive on this host."""
    sessions = record.get("sessions") or [{}]
    last = sessions[-1]
    if last.get("status"):
        return str(last["status"])
    if last.get("host") == socket.gethostname() and _alive(last.get("pid")):
        return "running"
    return "killed"


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
