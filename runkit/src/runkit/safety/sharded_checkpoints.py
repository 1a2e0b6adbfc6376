"""Sharded checkpoints (FSDP, ``ModelParallelStrategy``) written as the kit writes files: each process its shard into a
temporary folder, rank 0 the rest and a digest per file, and one atomic step last.

Lightning's ``FSDPStrategy(state_dict_type="sharded")`` and ``ModelParallelStrategy`` (``save_distributed_checkpoint``,
its default) save a checkpoint as a folder: each process's shard through ``torch.distributed.checkpoint`` (DCP), and
``meta.pt`` (loops, callbacks, RNG states: all but the weights and optimizer states) from rank 0. They write it in
place, with no digest: a kill mid-save leaves a folder of two steps' files. Here a save goes:

1. every process looks for NaN and Inf in its shard; if any finds one, all refuse the save (the name keeps the last
   finite checkpoint);
2. each writes its shard into ``.<name>.<pid>@<host>.<id>.tmp`` beside the checkpoint (DCP fsyncs every file);
3. each hashes its share of the folder's files; rank 0 writes ``meta.pt`` (hashed as written) and ``manifest.sha256``
   (a ``<sha256>  <file>`` line per file: ``sha256sum -c manifest.sha256`` checks it by hand), fsynced;
4. the run's record gets the manifest's digest as the name's pending one, durably (``digests.py``'s order);
5. the folder is renamed to its version's name (``.<name>.<id>.shards``) and the name, a link to the version it
   holds, is replaced by a link to the new one in one ``rename``, fsynced: a SIGKILL at any moment leaves the old
   checkpoint or the new one under the name, never a mix. The old version is deleted, and the record commits.

The name is a link replaced by ``rename`` rather than a folder swapped by ``renameat2(RENAME_EXCHANGE)`` because a
rename is atomic on every POSIX file system, the shared ones multi-node runs write to among them (NFS refuses
``RENAME_EXCHANGE``), and whatever reads the name follows the link (``--ckpt_path last|best``, ``runs``, Lightning's
loads). What a killed save leaves (its temporary folder or link, a version no link names) goes at the next save
(``checkpoint_io.remove_abandoned``). A load checks the manifest against the run's record and each file against the
manifest (``sharded_reads.py``).

Saves are synchronous, in the loop: in the background thread, DCP's collectives would share the process group with the
loop's, in an order no process controls. A store (``s3://...``) cannot hold them: DCP writes files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint import save as dcp_save

from ..lightning_internals import SHARDED_METADATA, sharded_state
from ..store import StorePath, location
from .checkpoint_io import AtomicCheckpointIO, CheckpointWriteError, fsync_directory, remove_abandoned
from .digests import HashingWriter, Written, file_sha256
from .finite import listed, named_tensors, nonfinite_names
from .nonfinite import ADVICE, NonFiniteCheckpointError
from .sharded_reads import MANIFEST, verify_sharded

_HOST = socket.gethostname()


def take_over(trainer: pl.Trainer) -> None:
    """Has ``trainer``'s sharded strategy save, load and delete its checkpoints here (``command/always_on.py``)."""
    strategy = trainer.strategy
    writer = strategy.checkpoint_io if isinstance(strategy.checkpoint_io, AtomicCheckpointIO) else None
    load, remove = strategy.load_checkpoint, strategy.remove_checkpoint

    def save_checkpoint(checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(strategy).__name__}.save_checkpoint takes no storage_options")
        path = location(strategy.broadcast(str(filepath)))
        if isinstance(path, StorePath):
            raise CheckpointWriteError(
                f"cannot write checkpoint {path}: sharded checkpoints need a local or shared file system"
            )
        save_sharded(sharded_state(strategy, checkpoint), checkpoint, path, writer)

    def load_checkpoint(checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        if (path := Path(checkpoint_path)).is_dir():
            verify_sharded(path)
        return load(checkpoint_path, weights_only)

    def remove_checkpoint(filepath: Any) -> None:
        if (path := Path(filepath)).is_symlink():  # Lightning's removal deletes a folder, and refuses a link to one
            if strategy.is_global_zero:
                target = path.resolve()
                path.unlink()
                shutil.rmtree(target, ignore_errors=True)
            return
        remove(filepath)

    strategy.save_checkpoint = save_checkpoint  # type: ignore[method-assign]
    strategy.load_checkpoint = load_checkpoint  # type: ignore[method-assign]
    strategy.remove_checkpoint = remove_checkpoint  # type: ignore[method-assign]
    rank_zero_info(f"checkpoints: sharded ({type(strategy).__name__}), each process its shard, saved in the loop")


def save_sharded(
    state: dict[str, Any], checkpoint: dict[str, Any], path: Path, writer: AtomicCheckpointIO | None
) -> None:
    """Saves ``state`` (weights and optimizer states, sharded) and ``checkpoint`` (the rest: ``meta.pt``) as the folder
    ``path``, in the order above; every process calls it, and every one raises if the save failed.

    Raises:
        NonFiniteCheckpointError: a shard holds NaN or Inf (nothing was written).
        CheckpointWriteError: the folder cannot be written or committed (what the name held is intact).
    """
    rank, world = _rank_and_world()
    if writer is not None:
        writer.saves.wait()  # a file's save in flight commits first
    bad = sorted({name for found in _everyone(nonfinite_names(_local(state))) for name in found})
    if bad:
        raise NonFiniteCheckpointError(
            f"refused to write {path} at global step {checkpoint.get('global_step')}: {listed(bad)} hold NaN or Inf;"
            f" the checkpoint keeps the last finite state it had. {ADVICE}"
        )
    token = _from_rank_zero(f"{os.getpid()}@{_HOST}.{uuid.uuid4().hex[:8]}")
    staging = path.with_name(f".{path.name}.{token}.tmp")
    failure = None
    if rank == 0:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_abandoned(path)
            remove_unnamed_versions(path)
            staging.mkdir()
        except OSError as error:
            failure = f"cannot write checkpoint {path}: {error}"
    _agree(failure)
    try:
        dcp_save(state, storage_writer=FileSystemWriter(staging))  # its failure raises on every process
        names = _from_rank_zero(sorted(entry.name for entry in staging.iterdir()) if rank == 0 else None)
        digests = {name: file_sha256(staging / name) for name in names[rank::world]}  # each hashes its share
        shares = _everyone(digests)
    except Exception as error:
        if rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
        lines = str(error).strip().splitlines()
        raise CheckpointWriteError(f"cannot write checkpoint {path}: {lines[0] if lines else error!r}") from error
    failed: BaseException | None = None
    if rank == 0:
        try:
            commit(staging, path, checkpoint, {name: sha for share in shares for name, sha in share.items()}, writer)
        except BaseException as error:
            shutil.rmtree(staging, ignore_errors=True)
            failed = error
    failure = _from_rank_zero(None if failed is None else f"cannot write checkpoint {path}: {failed}")
    if failed is not None and not isinstance(failed, OSError):
        raise failed  # rank 0's own error (a listener's, an interrupt); the others raise the line below
    if failure is not None:
        raise CheckpointWriteError(failure) from failed


def commit(
    staging: Path, path: Path, checkpoint: dict[str, Any], digests: dict[str, str], writer: AtomicCheckpointIO | None
) -> None:
    """Rank 0: writes ``meta.pt`` and the manifest into ``staging``, records their digest, makes ``path`` name it."""
    with open(staging / SHARDED_METADATA, "xb") as file:
        with HashingWriter(file) as hashing:
            torch.save(checkpoint, hashing)
        file.flush()
        os.fsync(file.fileno())
    digests[SHARDED_METADATA] = hashing.written().sha256
    manifest = "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode()
    with open(staging / MANIFEST, "xb") as file:
        file.write(manifest)
        file.flush()
        os.fsync(file.fileno())
    fsync_directory(staging)
    size = sum((staging / name).stat().st_size for name in digests) + len(manifest)
    written = Written(hashlib.sha256(manifest).hexdigest(), size)  # the manifest's digest, the folder's bytes
    for listener in writer.writing if writer is not None else []:
        listener(path, written, checkpoint)
    version = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.shards")
    os.rename(staging, version)
    old = path.resolve() if path.is_symlink() else None
    link = staging.with_name(f"{staging.name.removesuffix('.tmp')}-link.tmp")
    os.symlink(version.name, link)  # relative: the run folder can move
    if path.is_dir() and not path.is_symlink():  # a folder Lightning wrote in place: moved aside first, not atomic
        old = staging.with_name(f"{staging.name.removesuffix('.tmp')}-old.tmp")
        os.rename(path, old)
    os.replace(link, path)  # the commit: the name holds the new version
    fsync_directory(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    for saved in writer.saved if writer is not None else []:
        saved(path, checkpoint)


def remove_unnamed_versions(path: Path) -> None:
    """Deletes the versions of ``path`` that it does not name: a save killed after its rename, or before deleting the
    version it replaced. (One process writes a run's checkpoints: the run's lock.)"""
    current = path.resolve().name if path.is_symlink() else None
    for version in path.parent.glob(f".{path.name}.*.shards"):
        if version.name != current:
            shutil.rmtree(version, ignore_errors=True)


def _local(state: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """This process's part of every tensor in ``state`` (a ``DTensor``'s local tensor, a ``ShardedTensor``'s shards)."""
    found = []
    for name, tensor in named_tensors(state):
        if hasattr(tensor, "to_local"):
            found.append((name, tensor.to_local()))
        elif hasattr(tensor, "local_shards"):
            found += [(name, shard.tensor) for shard in tensor.local_shards()]
        else:
            found.append((name, tensor))
    return found


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _from_rank_zero(value: Any) -> Any:
    """Rank 0's ``value``, on every process."""
    if _rank_and_world()[1] == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _everyone(value: Any) -> list[Any]:
    """Every process's ``value``, by rank, on every process."""
    world = _rank_and_world()[1]
    if world == 1:
        return [value]
    values: list[Any] = [None] * world
    dist.all_gather_object(values, value)
    return values


def _agree(failure: str | None) -> None:
    """Raises rank 0's ``failure`` on every process, if it failed: none waits for a save that cannot go on."""
    if (failure := _from_rank_zero(failure)) is not None:
        raise CheckpointWriteError(failure)
