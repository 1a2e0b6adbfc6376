"""Checkpoint digests: the SHA-256 of every checkpoint the kit writes, kept in its run's record and checked on load.

``torch.load`` checks no CRC of its zip archive: a bit flipped in a tensor's bytes (a failing disk, a bad copy)
loads as another number, silently. The kit's checkpoint writer hashes the bytes as ``torch.save`` writes them (no
read back), and ``provenance.yaml`` keeps, per file of the run (``checkpoints/last.ckpt``, ``checkpoints/best.ckpt``,
any other written inside the run folder), its ``sha256``, ``size`` and global ``step``; a sharded checkpoint (a folder)
has the digest of its manifest, which holds each file's (``sharded_checkpoints.py``). Every load of the kit
(``--ckpt_path`` of fit, validate, test, predict, export, and the checkpoint plugin's own reads) hashes the file
first and refuses one whose digest is not the recorded one. A file without a digest record (handed on outside its
run, its entry lost or malformed) loads unchecked, and one line says so and why.

This module computes and checks digests; the run's record (``run/provenance.RunRecord``, the one writer of
``provenance.yaml``) keeps them, in the order below.

SHA-256: 1.7 GB/s on the SHA extensions of current x86-64 and ARMv8 processors (blake2b: 0.9 GB/s on the same
machine), and ``sha256sum`` checks a file by hand.

The record never refuses a good checkpoint, whenever the writer is killed. A write goes:

1. the new file is written to a temporary name and fsynced, its digest computed on the way (``HashingWriter``);
2. the record gets that digest as the entry's ``pending`` one, beside the current one, and is fsynced
   (``RunRecord.checkpoint_writing``);
3. the file is renamed into place (``checkpoint_io.atomic_save``);
4. the pending digest becomes the entry (``RunRecord.checkpoint_saved``; not fsynced: a record that lost this write
   still has step 2's).

A load accepts the entry's digest or its pending one: killed before 3, the old file matches the entry; after
it, the new one matches ``pending``.

A run in a store (``store.py``) keeps the same order, without fsyncs: its record and its checkpoint are each
one write (the object is whole or absent), step 3 is the checkpoint's upload, and a load hashes the bytes it read.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import yaml
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..store import RunPath, StorePath, location

RECORD_FILE = "provenance.yaml"  # a run's record (run/records.py's FILE)
KEY = "checkpoints"  # the record's mapping of checkpoint files (relative to the run folder) to their digests
ALGORITHM = "sha256"
_OVERLAP = 1 << 20  # chunks at least this long are hashed in a thread while they are written
_CHUNK = 8 << 20  # bytes read at a time to verify a file


class Written(NamedTuple):
    """What ``HashingWriter`` wrote: the SHA-256 (hex) and the length of the bytes."""

    sha256: str
    size: int


class HashingWriter:
    """A binary file for ``torch.save`` that hashes what passes through it.

    A large chunk (a tensor's bytes) is hashed in a second thread while the file takes it: hashlib and the file's
    write both let go of the GIL, so the hash mostly hides behind the copy into the page cache.
    """

    def __init__(self, file: Any) -> None:
        self.file, self._hash, self._size = file, hashlib.sha256(), 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-digest")

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if view.nbytes < _OVERLAP:
            self._hash.update(view)
            written = self.file.write(view)
        else:
            hashed = self._pool.submit(self._hash.update, view)
            try:
                written = self.file.write(view)
            finally:
                hashed.result()  # before returning: the caller may reuse the buffer
        self._size += view.nbytes
        return written

    def flush(self) -> None:
        self.file.flush()

    def written(self) -> Written:
        return Written(self._hash.hexdigest(), self._size)

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._pool.shutdown()


def verify(path: str | RunPath, data: bytes | None = None) -> None:
    """Raises ``ValueError`` (one line naming the file) if ``path``'s run recorded another digest for it; ``data``: the
    bytes read from it (a store's object, hashed as they are rather than downloaded again).

    A file without a digest record loads unchecked: one line (once per file and process) says so, and why.
    """
    path = location(path) if isinstance(path, str) else path
    record, entry, missing = recorded(path)
    candidates = (entry, entry.get("pending"))
    accepted = [digest for digest in candidates if isinstance(digest, dict) and digest.get(ALGORITHM)]
    if not accepted:
        _say_unchecked(path, missing or f"its entry under `{KEY}` in {record} holds no {ALGORITHM}")
        return
    actual = hashlib.sha256(data).hexdigest() if data is not None else file_sha256(path)
    if any(actual == digest[ALGORITHM] for digest in accepted):
        return
    expected = " or ".join(f"{digest[ALGORITHM]} (step {digest.get('step')})" for digest in accepted)
    raise ValueError(
        f"checkpoint {path} is not the file its run wrote: its SHA-256 is {actual}, {record} recorded {expected}."
        " Its bytes changed after the write (a failing disk, a damaged copy, an edit); use another checkpoint, or,"
        f" to load it anyway, delete its entry under `{KEY}` in {record}"
    )


def recorded(path: RunPath) -> tuple[RunPath | None, dict[str, Any], str | None]:
    """The record of the run folder that holds ``path`` (its parent or grandparent), ``path``'s entry in it (``{}``:
    none), and why there is no entry to check against (``None``: there is one)."""
    path = path.resolve() if isinstance(path, StorePath) else named(path)
    for run in (path.parent, path.parent.parent):
        record = run / RECORD_FILE
        if not record.is_file():
            continue
        try:
            data = yaml.safe_load(record.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return record, {}, f"{record} is not a readable record"
        entries = data.get(KEY) if isinstance(data, dict) else None
        entry = entries.get(record_key(path, run)) if isinstance(entries, dict) else None
        if entry is None:
            return record, {}, f"{record} has no entry for it under `{KEY}`"
        if not isinstance(entry, dict):
            return record, {}, f"its entry under `{KEY}` in {record} is not a digest"
        return record, entry, None
    return None, {}, f"it is not inside a run folder with a {RECORD_FILE}"


_UNCHECKED: set[str] = set()  # files already said to load unchecked, in this process


def _say_unchecked(path: RunPath, why: str) -> None:
    if str(path) in _UNCHECKED:
        return
    _UNCHECKED.add(str(path))
    rank_zero_info(f"checkpoint {path}: not checked against a digest ({why}); it loads as it is")


_HASHED: dict[tuple[int, int, int, int], str] = {}  # (device, inode, size, mtime) -> SHA-256, files hashed already


def file_sha256(path: RunPath) -> str:
    """The SHA-256 (hex) of the file's bytes; one file is hashed once per process while it stays the same file."""
    if isinstance(path, StorePath):  # streamed, each time: an object has no inode to know it again by
        digest = hashlib.sha256()
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()
    stat = path.stat()
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)  # a rewrite (rename) is another inode
    if identity not in _HASHED:
        digest = hashlib.sha256()
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        with open(path, "rb") as file:
            while count := file.readinto(buffer):
                digest.update(view[:count])
        _HASHED[identity] = digest.hexdigest()
    return _HASHED[identity]


def record_key(path: RunPath, run: RunPath) -> str | None:
    """``path`` relative to the run folder ``run``, as the record names it (``None``: outside it)."""
    if isinstance(path, StorePath) or isinstance(run, StorePath):
        inside = isinstance(path, StorePath) and isinstance(run, StorePath) and str(path).startswith(f"{run}/")
        return str(path)[len(str(run)) + 1 :] if inside else None
    relative = os.path.relpath(named(path), run.resolve())
    return None if relative.startswith("..") or os.path.isabs(relative) else Path(relative).as_posix()


def named(path: Path) -> Path:
    """``path`` resolved, but for its own name where it is a link to a folder: a sharded checkpoint's name is a link to
    its current version (``sharded_checkpoints.py``), and the record knows it by that name."""
    return path.parent.resolve() / path.name if path.is_symlink() and path.is_dir() else path.resolve()
