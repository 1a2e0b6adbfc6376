"""Checks of the folders a command writes to, before it writes: the run root (a local folder, or a store's bucket),
the logger's and checkpoints' folders, and the folders the data module is configured with (``data_dir``).

Each raises ``BadInputError`` naming the key (``trainer.default_root_dir``, ``data.init_args.data_dir``) before the run
folder is made.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from ..bad_input import BadInputError, folder_arguments
from ..store import StoreError, location
from ..writable import unwritable


def check_paths(trainer: pl.Trainer) -> None:
    """Refuses a ``default_root_dir``, logger folder or checkpoint folder that cannot be created or written."""
    folders = {"trainer.default_root_dir": trainer.default_root_dir, "run directory": trainer.log_dir}
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            folders[f"{type(callback).__name__} dirpath"] = callback.dirpath
    for key, folder in folders.items():
        check_folder(key, folder)


def check_folder(key: str, folder: str | Path | None) -> None:
    """Refuses a folder (named by config ``key``) that cannot be created or written."""
    if folder is None:
        return
    if "://" in str(folder):  # a store: its filesystem installed, its bucket there and answering
        from ..store_access import check_root  # only a run in a store asks one

        try:
            check_root(location(folder))
        except StoreError as error:
            raise BadInputError(f"{key}: {error}") from None
        return
    path = Path(folder)
    existing = next(p for p in (path, *path.parents) if p.exists())  # "." or "/" at the latest
    if existing == path and not path.is_dir():
        raise BadInputError(f"{key}: {path} is a file, not a folder")
    if not existing.is_dir():
        raise BadInputError(f"{key}: cannot create {path}: {existing} is a file, not a folder")
    if reason := unwritable(existing):
        raise BadInputError(f"{key}: cannot write in {existing} ({reason})")


def check_data_folders(datamodule: pl.LightningDataModule | None) -> None:
    """Refuses a folder the data module is configured with (``data_dir``, any ``*_dir`` argument) that is a file, or
    that does not exist and cannot be created: its data or cache goes there (``prepare_data``). One that exists is
    left to the module: a read-only folder of data downloaded before is fine."""
    if datamodule is None:
        return
    for name, folder in folder_arguments(datamodule).items():
        if not folder.is_dir():
            check_folder(f"data.init_args.{name}", folder)
