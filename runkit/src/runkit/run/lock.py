"""One process at a time writes a run: ``<run>/.lock`` names the host and the process that holds it.

A requeued job can start while the job it replaces still runs; both would write ``last.ckpt`` and
``provenance.yaml``, and one session's end would be lost. The ``fit`` that creates or continues a run takes the
lock first (before it writes anything) and gives it back when its session ends. A second process is refused
with one line naming the holder. A holder that died (SIGKILL, a lost node) is detected and its lock taken
over: on the same host, its process is gone; on another host, it stopped refreshing the lock (every
``REFRESH_S``) for more than ``STALE_S``.

A run in a store (``store.py``) has no shared disk to take an exclusive file on: the lock is an object created by a
conditional write (S3's ``If-None-Match: *``), which one process wins; the others are refused. Refreshing it
rewrites it (its last-modified time is the store's clock, its age is judged against this machine's: clocks apart by
more than ``STALE_S`` misjudge it). A stale one is deleted, then created anew: two processes taking over the same
dead holder's lock within the same moment could both delete and one create after the other's create; a store
without conditional writes (fsspec checks, then writes) has that window for every lock.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from datetime import datetime

import yaml

from ..store import RunPath, StorePath

NAME = ".lock"
REFRESH_S = 30.0  # how often a holder touches its lock
STALE_S = 120.0  # a lock untouched for this long, held on another host, belongs to a process that is gone


class RunLockedError(ValueError):
    """Another process holds the run; the message names it."""


class RunLock:
    """The lock on one run folder, held by this process between ``acquire`` and ``release``."""

    def __init__(self, directory: RunPath) -> None:
        self.path = directory / NAME
        self._stop = threading.Event()
        self._touching = threading.Lock()  # a refresh in progress finishes before release removes the lock
        self._held = False

    def acquire(self) -> None:
        """Takes the lock, or the lock of a holder that died; raises ``RunLockedError`` if a live process holds it."""
        for _ in range(3):  # another process may take over the same stale lock at the same moment
            holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": datetime.now().isoformat()}
            try:
                _create(self.path, yaml.safe_dump(holder))
            except FileExistsError:
                holder = _holder(self.path)
                if not _stale(self.path, holder):
                    raise RunLockedError(_refusal(self.path, holder)) from None
                _take_over(self.path)
                continue
            self._held = True
            threading.Thread(target=self._refresh, name="run-lock", daemon=True).start()
            return
        raise RunLockedError(_refusal(self.path, _holder(self.path)))

    def release(self) -> None:
        """Gives the lock back (if this process holds it)."""
        self._stop.set()
        with self._touching:  # a store's refresh rewrites the lock: never after it is removed
            if self._held and _holder(self.path).get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self._held = False

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_S):
            with self._touching, contextlib.suppress(OSError):
                if self._stop.is_set():
                    return
                if isinstance(self.path, StorePath):  # an object's time changes only with its bytes: rewritten
                    self.path.write_bytes(self.path.read_bytes())
                else:
                    os.utime(self.path)


def _create(path: RunPath, text: str) -> None:
    """Creates the lock file holding ``text``; raises ``FileExistsError`` if it exists (one process wins)."""
    if isinstance(path, StorePath):
        path.create_new(text.encode())
        return
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


def _take_over(path: RunPath) -> None:
    """Removes a stale lock, so that ``_create`` can be tried again."""
    if isinstance(path, StorePath):
        path.unlink(missing_ok=True)  # no rename in a store: see the module
        return
    with contextlib.suppress(FileNotFoundError):  # whoever renames it first takes over
        os.rename(path, path.with_name(f"{NAME}.stale.{os.getpid()}"))
        path.with_name(f"{NAME}.stale.{os.getpid()}").unlink()


def _holder(path: RunPath) -> dict[str, object]:
    try:
        holder = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _stale(path: RunPath, holder: dict[str, object]) -> bool:
    pid = holder.get("pid")
    if holder.get("host") == socket.gethostname() and isinstance(pid, int):
        return not _alive(pid)
    try:
        return time.time() - path.stat().st_mtime > STALE_S
    except FileNotFoundError:
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def _refusal(path: RunPath, holder: dict[str, object]) -> str:
    who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')} (since {holder.get('since', '?')})"
    return (
        f"run {path.parent} is being written by {who}: wait for it to end, or stop it; a holder that dies gives"
        f" the run up ({path})"
    )
