"""Where a run's files live: a local folder (``pathlib.Path``) or an fsspec store (``s3://``, ``gs://``, ``az://``,
``memory://``), named by ``trainer.default_root_dir``.

``location`` turns the configured root (or a checkpoint's path) into one or the other. A URL becomes a ``StorePath``:
the part of ``Path``'s interface the run's code uses (``/``, ``name``, ``parent``, ``exists``, ``read_text``, ...),
on the URL's fsspec filesystem. It has no ``__fspath__``: code that would hand it to ``open`` or ``os`` fails
instead of writing a local folder named after the URL (what ``Path("s3://b/runs")`` does: ``s3:/b/runs``).
``file://`` URLs are local paths.

On an object store, one write (``write_bytes``, ``write_text``: a single PUT, or a multipart upload completed at
its end) makes the object appear whole or not at all; the object it replaces stays readable until then (S3, GCS,
Azure block blobs, fsspec's memory store). There is no rename: ``create_new`` is a conditional write
(``If-None-Match: *`` on S3 through s3fs, exclusive on the memory store: ``CONDITIONAL``); elsewhere (GCS, Azure)
the object is checked to be absent, then written (two writers may both pass).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import fsspec
from fsspec.core import split_protocol

from .project import current

EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
"""runkit's extra that installs the filesystem of each protocol (``pip install "runkit[s3]"``)."""


BUCKETED = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
"""Protocols whose paths start with a bucket (or container), which the kit never creates: a run root whose bucket does
not exist is refused (``check_root``); s3fs's ``makedirs`` would create it, from a misspelled name too."""

CONDITIONAL = ("s3", "s3a", "memory")
"""Protocols whose fsspec filesystem writes an object only if it is absent, in one request (``create_new``): s3fs
(``If-None-Match: *``) and the memory store. Others (gcsfs, adlfs: untested here) are checked, then written."""


class StoreError(ValueError):
    """A run root that names no usable store (an unknown protocol, or one whose package is not installed)."""


class Stat(NamedTuple):
    """What the run reads of an object's ``stat``: its size and when it was last written (seconds since the epoch)."""

    st_size: int
    st_mtime: float


class StorePath:
    """A file or folder on an fsspec filesystem, named by its URL (``s3://bucket/runs/x``), used as a ``Path``."""

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem) -> None:
        protocol, _, rest = url.partition("://")
        self.url = f"{protocol}://{rest.rstrip('/')}"
        self.fs = fs
        self.path = fs._strip_protocol(self.url)  # the filesystem's own name for it (no protocol)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"StorePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __truediv__(self, name: str | Path) -> StorePath:
        return StorePath(f"{self.url}/{Path(name).as_posix()}", self.fs)

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1] if "/" in self.url.partition("://")[2] else ""

    @property
    def parent(self) -> StorePath:
        protocol, _, rest = self.url.partition("://")
        return StorePath(f"{protocol}://{rest.rpartition('/')[0] or rest}", self.fs)

    def with_name(self, name: str) -> StorePath:
        return self.parent / name

    def with_suffix(self, suffix: str) -> StorePath:
        stem = self.name.rsplit(".", 1)[0] if "." in self.name.lstrip(".") else self.name
        return self.with_name(f"{stem}{suffix}")

    def resolve(self) -> StorePath:
        return self

    def absolute(self) -> StorePath:
        return self

    def relative_to(self, other: StorePath) -> Path:
        if not self.url.startswith(f"{other.url}/"):
            raise ValueError(f"{self} is not under {other}")
        return Path(self.url[len(other.url) + 1 :])

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))

    def is_file(self) -> bool:
        return bool(self.fs.isfile(self.path))

    def is_dir(self) -> bool:
        return bool(self.fs.isdir(self.path))

    def iterdir(self) -> Iterator[StorePath]:
        for entry in self.fs.ls(self.path, detail=False):
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if name and entry.rstrip("/") != self.path.rstrip("/"):
                yield self / name

    def glob(self, pattern: str) -> Iterator[StorePath]:
        for found in self.fs.glob(f"{self.path}/{pattern}"):
            yield self / str(found)[len(self.path) + 1 :]

    def stat(self) -> Stat:
        info = self.fs.info(self.path)
        when = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
        seconds = when.timestamp() if isinstance(when, datetime) else float(when)
        return Stat(int(info.get("size") or 0), seconds)

    def read_bytes(self) -> bytes:
        return bytes(self.fs.cat_file(self.path))

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> None:
        """One write: the object appears whole, or the one it replaces stays (see the module)."""
        self.fs.pipe_file(self.path, bytes(data))

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def create_new(self, data: bytes) -> None:
        """Writes the object only if none exists; raises ``FileExistsError`` otherwise (see the module)."""
        if self.protocol in CONDITIONAL:
            self.fs.pipe_file(self.path, bytes(data), mode="create")
            return
        if self.exists():  # no conditional write known here: checked, then written (two writers may both pass)
            raise FileExistsError(self.url)
        self.write_bytes(data)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        # Object stores have no folders: a folder exists once an object is under it.
        if not exist_ok and self.exists():
            raise FileExistsError(self.url)
        if self.protocol in BUCKETED:  # nothing to make, and never a bucket (s3fs's makedirs makes a missing one)
            return
        with contextlib.suppress(FileExistsError):
            self.fs.makedirs(self.path, exist_ok=True)

    @property
    def protocol(self) -> str:
        return self.url.partition("://")[0]

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.rm_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def remove_tree(self) -> None:
        """Removes the folder and everything under it."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.path, recursive=True)

    def open(self, mode: str = "rb") -> Any:
        return self.fs.open(self.path, mode)


RunPath = Path | StorePath
"""A run's folder or file: local, or in a store."""


def location(where: str | os.PathLike[str] | StorePath) -> RunPath:
    """``where`` as the run's code uses it: a ``Path``, or a ``StorePath`` for a URL (``file://``: a local path).

    Raises ``StoreError`` for an unknown protocol, or one whose filesystem package is not installed (naming the
    extra that installs it), before anything is written.
    """
    if isinstance(where, StorePath):
        return where
    text = os.fspath(where)
    protocol, rest = split_protocol(text)
    if protocol is None or "://" not in text:
        return Path(text)
    if protocol in ("file", "local"):
        return Path(rest)
    try:
        kind = fsspec.get_filesystem_class(protocol)
    except ImportError as error:
        extra = EXTRAS.get(protocol)
        install = install_hint(extra) if extra else "its package"
        raise StoreError(f"{text}: the {protocol}:// filesystem is not installed: {error}; install {install}") from None
    except ValueError:
        raise StoreError(f"{text}: no filesystem knows the protocol {protocol}:// (fsspec's protocols)") from None
    # Listings are not cached: another process (a resume, a second job) writes the same run.
    fs = kind(**{"use_listings_cache": False, **fsspec.config.conf.get(protocol, {})})
    return StorePath(text, fs)


def install_hint(extra: str) -> str:
    """How to install ``extra``: the project's own extra where its distribution declares one, else runkit's."""
    try:
        declared = importlib.metadata.metadata(current().program).get_all("Provides-Extra") or []
    except importlib.metadata.PackageNotFoundError:
        declared = []
    if extra in declared:
        return f'the project\'s `{extra}` extra: pip install -e ".[{extra}]"'
    return f'runkit\'s `{extra}` extra: pip install "runkit[{extra}]" (pip install -e ".[{extra}]" in runkit/)'


def is_remote(path: object) -> bool:
    """Whether ``path`` is in a store (a ``StorePath``, or a URL other than ``file://``)."""
    if isinstance(path, StorePath):
        return True
    protocol, _ = split_protocol(str(path))
    return protocol is not None and "://" in str(path) and protocol not in ("file", "local")


def remove_tree(path: RunPath) -> None:
    """Removes a folder and everything under it, local or in a store."""
    if isinstance(path, StorePath):
        path.remove_tree()
    else:
        shutil.rmtree(path)
