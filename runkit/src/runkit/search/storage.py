"""Where a study lives, how a dead worker's trial is found and run again, and how workers take turns.

Embedded by default: an Optuna journal file (``study.log``) in the search's directory, which any number of
worker processes on one machine append to safely (SQLite in their place fails with "database is locked").
Past one machine: a database URL (``postgresql://user:password@host:5432/db``); workers on any number of
machines join the study by its name.

A worker that dies mid-trial (SIGKILL, a lost node) leaves its trial ``RUNNING``. Every running trial beats a
heartbeat into the storage; a trial whose heartbeat stops for ``grace_period`` seconds, or whose worker process
is gone from this machine, is marked failed, and its configuration queued again with the same run directory, so
it resumes from its ``last.ckpt``. Optuna 5 has heartbeats for ``RDBStorage`` only; ``JournalStorage`` gets them here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat  # the interface `fail_stale_trials` checks for
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

try:
    import fcntl
except ImportError:  # Windows: workers there do not lock the journal between them (see `exclusive`)
    fcntl = None  # type: ignore[assignment]

JOURNAL = "study.log"
HOST = socket.gethostname()


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal storage in a file, with heartbeats: a trial is stale once its worker is gone."""

    def __init__(self, path: Path, heartbeat_interval: int, grace_period: int) -> None:
        # Absolute: Optuna's lock is a symlink to the file, and a relative target never resolves, so a lock left by a
        # killed process was never found stale (every waiter spun for good instead of taking it after 30 s).
        super().__init__(JournalFileBackend(str(path.absolute())))
        self.path, self.heartbeat_interval, self.grace_period = path, heartbeat_interval, grace_period

    def record_heartbeat(self, trial_id: int) -> None:
        number = self.get_trial(trial_id).number
        beat = {"number": number, "time": time.time(), "host": HOST, "pid": os.getpid()}
        self.set_trial_system_attr(trial_id, "heartbeat", beat)

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        stale = []
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            beat = trial.system_attrs.get("heartbeat")
            if not isinstance(beat, dict) or beat.get("number") != trial.number:  # a retry carries its source's
                beat = {"time": trial.datetime_start.timestamp() if trial.datetime_start else now}
            gone = beat.get("host") == HOST and not _alive(beat["pid"])
            if gone or now - beat["time"] > self.grace_period:
                stale.append(trial._trial_id)
        return stale

    def get_heartbeat_interval(self) -> int:
        return self.heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> Callable[[optuna.Study, FrozenTrial], None]:
        return retry


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queues failed ``trial``'s configuration again, with the values it reported (it resumes from last.ckpt)."""
    RetryHeartbeatStaleTrialCallback(inherit_intermediate_values=True)(study, trial)


def open_storage(
    storage: str | None, search_dir: Path, heartbeat_interval: int, grace_period: int
) -> optuna.storages.BaseStorage:
    """The journal file in ``search_dir`` (``storage: null``) or at a path, or the database at a URL.

    Raises ``ValueError`` naming the storage when it cannot be used: a journal path that is a folder or holds
    something else than an Optuna journal, a URL of a database without a driver here, a database that cannot be
    reached. Nothing is written then.
    """
    if storage is None or "://" not in storage:
        path = Path(storage or search_dir / JOURNAL)
        named = f"--storage {storage}" if storage else str(path)
        if path.is_dir():
            raise ValueError(f"{named}: a folder, not a journal file: give a file's path, e.g. {path / JOURNAL}")
        if path.is_file():
            check_journal(path, named)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return HeartbeatJournalStorage(path, heartbeat_interval, grace_period)
        except OSError as error:
            raise ValueError(f"{named}: cannot write {path}: {error.strerror or error}") from None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError, ProgrammingError

    try:
        url = make_url(storage)
    except ArgumentError as error:
        raise ValueError(f"--storage {shown(storage)}: not a database URL ({error}); {_STORAGES}") from None
    if url.drivername == "postgresql":  # the driver the `search` extra installs, whatever SQLAlchemy's default
        url = url.set(drivername="postgresql+psycopg")
    for attempt in range(5):
        try:
            return RDBStorage(
                url.render_as_string(hide_password=False),
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                heartbeat_stale_trial_callback=retry,
                engine_kwargs={"pool_pre_ping": True},
            )
        except NoSuchModuleError:
            raise ValueError(
                f"--storage {shown(storage)}: no database driver for '{url.drivername}'; {_STORAGES}"
            ) from None
        except ImportError as error:  # SQLAlchemy knows the database, its Python driver is not installed
            raise ValueError(
                f"--storage {shown(storage)}: the driver of '{url.drivername}' is not installed ({error}); {_STORAGES}"
            ) from None
        except OperationalError as error:
            reason = str(error.orig).strip().splitlines()[0] if error.orig else type(error).__name__
            raise ValueError(f"--storage {shown(storage)}: cannot connect ({reason})") from None
        except (IntegrityError, ProgrammingError):
            # Workers that start together on an empty database race to create Optuna's tables (optuna#1092):
            # one wins, the others find the tables on their next try.
            if attempt == 4:
                raise
            time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def study_exists(storage: str | None, search_dir: Path, study_name: str) -> bool:
    """Whether the storage holds the study already; reads only (a journal that does not exist is not created)."""
    if storage is None or "://" not in storage:
        path = Path(storage or search_dir / JOURNAL)
        if not path.is_file():
            return False
        check_journal(path, f"--storage {storage}" if storage else str(path))
        opened: optuna.storages.BaseStorage = JournalStorage(JournalFileBackend(str(path.absolute())))
    else:
        opened = open_storage(storage, search_dir, heartbeat_interval=10, grace_period=60)
    return any(study.study_name == study_name for study in opened.get_all_studies())


def check_journal(path: Path, named: str) -> None:
    """Raises ``ValueError`` naming ``path`` and the line unless it reads as an Optuna journal: one JSON object per
    line (the last line may be half-written: Optuna waits for its writer to finish it)."""
    try:
        with open(path, "rb") as file:
            lines = file.read().split(b"\n")[:-1]  # complete lines only
    except OSError as error:
        raise ValueError(f"{named}: cannot read {path}: {error.strerror or error}") from None
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            reason = error.msg if isinstance(error, json.JSONDecodeError) else "not UTF-8 text"
            raise ValueError(f"{named}: not an Optuna journal (line {number}: {reason}); {_NEW_STUDY}") from None
        if not isinstance(entry, dict) or "op_code" not in entry:
            raise ValueError(f"{named}: not an Optuna journal (line {number}: no op_code); {_NEW_STUDY}")


_STORAGES = "give a journal file's path, or postgresql://user:password@host:5432/db"
_NEW_STUDY = "move it away, or start another study with another --run.name or --storage"


def shown(storage: str | None) -> str:
    """``storage`` as messages show it: a URL without its password."""
    if storage is None or "://" not in storage:
        return str(storage)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(storage).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL SQLAlchemy reads: mask what looks like a password
        return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", storage)


@contextlib.contextmanager
def exclusive(storage: optuna.storages.BaseStorage, study_name: str) -> Iterator[None]:
    """One worker at a time counts the trials and starts the next, so a study runs exactly ``trials`` of them.

    A lock file next to the journal; a PostgreSQL advisory lock; other databases: none (a worker may start one
    trial too many when two ask at the same instant).
    """
    if isinstance(storage, HeartbeatJournalStorage) and fcntl is not None:
        with open(f"{storage.path}.search-lock", "a") as lock:  # not `.lock`: Optuna's own
            fcntl.flock(lock, fcntl.LOCK_EX)  # released by the OS if the process dies
            yield
    elif isinstance(storage, RDBStorage) and storage.engine.dialect.name == "postgresql":
        from sqlalchemy import text

        with storage.engine.connect() as connection:
            key = {"name": f"search:{study_name}"}
            connection.execute(text("SELECT pg_advisory_lock(hashtext(:name))"), key)
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(hashtext(:name))"), key)
    else:
        yield


@contextlib.contextmanager
def heartbeat(storage: optuna.storages.BaseStorage, trial_id: int) -> Iterator[None]:
    """Beats ``trial_id``'s heartbeat every ``heartbeat_interval`` seconds while the block runs.

    Optuna's own heartbeat thread runs only inside ``Study.optimize``; the search asks and tells itself, to hold
    the trial count exact across workers.
    """
    assert isinstance(storage, BaseHeartbeat), "open_storage() gives storages with heartbeats"
    interval = storage.get_heartbeat_interval()
    stop = threading.Event()

    def beat() -> None:
        while True:
            storage.record_heartbeat(trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name="search-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would end the process there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
