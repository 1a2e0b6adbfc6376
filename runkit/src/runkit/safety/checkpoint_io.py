"""How checkpoint files are written and read: atomically, with ``weights_only=True``, and checked against their digest.

A checkpoint is written to a temporary file in its own directory, flushed and fsynced, then renamed
over the old one, so a crash at any moment leaves either the old file or the new one, never half of
either. Lightning's own ``_atomic_save`` stages the bytes through ``$TMPDIR`` (a cross-device move that
fails, or fills ``/tmp``: lightning#20270, #21253) and never fsyncs. Each file's SHA-256 is computed as it is written
and recorded by the run, then checked when it is read (``digests.py``).

A checkpoint in a store (``s3://...``: ``store.py``) is serialized in memory, hashed, its digest recorded, then
uploaded in one write: the object appears whole or not at all, and a crash mid-upload leaves the one before as it
was. Lightning's fsspec path writes it the same way, but records nothing and reads it back unchecked.

``LastCheckpoint``'s saves run all of this in a thread, on a snapshot of the state (``background_save.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..store import RunPath, StorePath, location
from .background_save import BackgroundSaves, Snapshots
from .digests import HashingWriter, Written, verify
from .finite import listed, nonfinite_in_checkpoint
from .nonfinite import ADVICE, NonFiniteCheckpointError

MapLocation = Callable[..., Any] | str | torch.device | dict[str, str] | None
_HOST = socket.gethostname()


class CheckpointWriteError(OSError):
    """A checkpoint could not be written; the message names the file. What was saved before is intact."""


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint plugin with crash-proof local writes, ``weights_only`` reads, and no NaN or Inf.

    A checkpoint whose weights or optimizer state hold a NaN or an Inf is refused (``NonFiniteCheckpointError``):
    the file on disk keeps its last finite state. A store's paths (``s3://...``) are written in one upload.
    Each function in ``writing`` is called with the path, the new file's digest and the checkpoint before the file
    replaces the old one (the run's record keeps the digest as pending then: ``run/provenance.py``); each in ``saved``
    with the path and the checkpoint once it is in place (the record commits the digest and the progress the
    checkpoint holds). A local file whose run recorded its digest is read only if it still has it.

    A save inside ``in_background()`` (``LastCheckpoint``'s, by default) returns once its snapshot is in host memory;
    the rest runs in a thread (``background_save.py``), in the same order. Every other save first waits for the one
    in flight: a stop's final save never overtakes it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writing: list[Callable[[RunPath, Written, dict[str, Any]], None]] = []
        self.saved: list[Callable[[RunPath, dict[str, Any]], None]] = []
        self.saves = BackgroundSaves()
        self._snapshots = Snapshots()
        self._background = False

    @contextlib.contextmanager
    def in_background(self) -> Iterator[None]:
        """Saves made inside this block return once their snapshot is taken and write in the background."""
        self._background = True
        try:
            yield
        finally:
            self._background = False

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            self.saves.wait()
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = location(path)
        self.saves.wait()  # the save in flight commits first: one snapshot in memory, files and record in order
        if not self._background:
            self._write(checkpoint, target)
            return
        snapshot = self._snapshots.take(checkpoint)
        self.saves.start(lambda: self._write(snapshot, target))  # raises the save before's failure, if it failed

    def _write(self, checkpoint: dict[str, Any], target: RunPath) -> None:
        """Refuses non-finite tensors, writes ``checkpoint`` to ``target`` (hashed as written), tells the listeners."""
        if bad := nonfinite_in_checkpoint(checkpoint):
            raise NonFiniteCheckpointError(
                f"refused to write {target} at global step {checkpoint.get('global_step')}: {listed(bad)} hold NaN or"
                f" Inf; the file keeps the last finite state it had. {ADVICE}"
            )

        def record(written: Written) -> None:
            for listener in self.writing:
                listener(target, written, checkpoint)

        if isinstance(target, StorePath):
            upload(checkpoint, target, record)
        else:
            atomic_save(checkpoint, target, record if self.writing else None)
        for listener in self.saved:
            listener(target, checkpoint)

    def load_checkpoint(
        self,
        path: str | Path,
        map_location: MapLocation = "cpu",
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        # Tensors load onto the CPU, whatever device wrote them; the Trainer then moves the model and the
        # optimizer state to its own device. `weights_only=None` (Lightning's default) means True.
        source = location(path)
        if isinstance(source, StorePath):  # read once, and checked as read: Lightning's fsspec read checks nothing
            data = source.read_bytes()
            verify(source, data)
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only is not False)
        verify(source)  # the command line checked it already (read_checkpoint): hashed once per process
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only is not False)

    def teardown(self) -> None:
        """Waits for the save in flight (the process may end right after); a failure nobody raised is said here."""
        self.saves.wait()
        if (failure := self.saves.take_failure()) is not None:
            print(f"warning: the checkpoint save in flight as the run ended failed: {failure}", file=sys.stderr)


def atomic_save(obj: object, path: Path, before_replace: Callable[[Written], object] | None = None) -> None:
    """``torch.save(obj, path)`` through a temporary file in ``path``'s directory: flush, fsync, rename.

    With ``before_replace``, the bytes are hashed as they are written, and it is called with their digest once
    they are on disk, before the rename.

    Raises:
        CheckpointWriteError: ``path`` cannot be written (its folder is a file, read-only, full, ...).
    """
    # The writer (pid@host) is in the name, so that another process's save in progress is never removed.
    partial = path.with_name(f".{path.name}.{os.getpid()}@{_HOST}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned(path)
        with open(partial, "xb") as file:
            if before_replace is None:
                torch.save(obj, file)
            else:
                with HashingWriter(file) as hashing:
                    torch.save(obj, hashing)
                written = hashing.written()
            file.flush()
            os.fsync(file.fileno())
        if before_replace is not None:
            before_replace(written)
        os.replace(partial, path)
        fsync_directory(path.parent)
    except BaseException as error:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise CheckpointWriteError(f"cannot write checkpoint {path}: {error}") from error
        if (reason := _failed_write(error)) is not None:
            raise CheckpointWriteError(f"cannot write checkpoint {path}: {reason}") from error
        raise


def upload(obj: object, path: StorePath, before_replace: Callable[[Written], object]) -> None:
    """``torch.save(obj)`` into memory, hashed; ``before_replace`` gets the digest; then one write to the store.

    Raises:
        CheckpointWriteError: the store refused or lost the write (what it held before is intact).
    """
    buffer = io.BytesIO()
    with HashingWriter(buffer) as hashing:
        torch.save(obj, hashing)
    before_replace(hashing.written())
    try:
        path.write_bytes(buffer.getbuffer())
    except OSError as error:
        raise CheckpointWriteError(f"cannot write checkpoint {path}: {error}") from error


def _failed_write(error: BaseException) -> str | None:
    """Why ``torch.save`` failed to write, if it did: its file writer reports a full disk as ``RuntimeError("[enforce
    fail at inline_container.cc:...] unexpected pos ...")``, the ``OSError`` from the file (if any) as its context."""
    if not isinstance(error, RuntimeError):
        return None
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError):
            return str(cause)
        cause = cause.__context__
    if "inline_container" in str(error) or "PytorchStreamWriter" in str(error):
        return f"{str(error).strip().splitlines()[0]} (is the disk full?)"
    return None


def remove_abandoned(path: Path, max_age_s: float = 24 * 3600) -> None:
    """Deletes the temporary files of ``path`` whose writer is gone: killed mid-save, they would pile up. A sharded
    save's temporary folder and link (``sharded_checkpoints.py``) are named the same way and go the same way.

    Another process may be writing the same file right now (two runs sharing a folder): its temporary file
    is never touched. A writer on this host is alive while its pid is; one on another host (a shared file
    system), or on a system without ``kill(pid, 0)``, is judged by age only.
    """
    for partial in path.parent.glob(f".{path.name}.*.tmp"):
        writer = partial.name[len(path.name) + 2 : -len(".tmp")].rpartition(".")[0]  # "<pid>@<host>"
        pid, _, host = writer.partition("@")
        if host == _HOST and pid.isdigit() and os.name == "posix":
            abandoned = not _alive(int(pid))
        else:
            try:
                abandoned = time.time() - partial.lstat().st_mtime > max_age_s
            except FileNotFoundError:  # its writer just renamed it into place
                continue
        if abandoned and partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial, ignore_errors=True)
        elif abandoned:
            partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def fsync_directory(directory: Path) -> None:
    """Makes a rename into ``directory`` durable (POSIX); other systems have no directory handles to sync."""
    if os.name != "posix":
        return
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
