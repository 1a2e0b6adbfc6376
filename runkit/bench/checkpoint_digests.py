"""What checkpoint digests cost: the SHA-256 the kit's checkpoint writer computes as it writes, and the check on load.

A 1 GiB state (8 tensors of 128 MiB) goes through the kit's checkpoint plugin (``AtomicCheckpointIO``) into a run
folder, with and without the digest record (``safety/digests.py``), alternated; then the kit's check of the file
(``digests.verify``: a read and a hash) runs once from the page cache, as it does right after a save, and once
after the file's pages are dropped (``posix_fadvise(DONTNEED)``), as after a restart. Times are wall times; the
load average of the machine is in the notes.

    python bench/checkpoint_digests.py            # this comparison alone, 5 repeats
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import Row


def drop_pages(path: Path) -> None:
    """Evicts the file's pages from the page cache (they are clean: the save fsynced them)."""
    if hasattr(os, "posix_fadvise"):
        handle = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(handle)


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def run(tiny: bool, repeats: int, workdir: Path) -> list[Row]:
    checkpoint_io, digests = (
        importlib.import_module("runkit.safety.checkpoint_io"),
        importlib.import_module("runkit.safety.digests"),
    )
    numbers = 2**18 if tiny else 2**25  # per tensor: 1 MiB or 128 MiB of float32
    state = {"state_dict": {f"layer{index}.weight": torch.randn(numbers) for index in range(8)}, "global_step": 1}
    run_dir = workdir / "digests" / "run"
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    record = importlib.import_module("runkit.run.provenance").RunRecord(run_dir, writer=True)
    plain, recorded = checkpoint_io.AtomicCheckpointIO(), checkpoint_io.AtomicCheckpointIO()
    recorded.writing.append(record.checkpoint_writing)
    recorded.saved.append(record.checkpoint_saved)
    path = run_dir / "checkpoints" / "last.ckpt"
    times: dict[str, list[float]] = {"save": [], "digest": [], "hot": [], "cold": []}
    loads = []
    for repeat in range(max(3, repeats)):
        for side in ("save", "digest") if repeat % 2 == 0 else ("digest", "save"):
            writer = plain if side == "save" else recorded
            times[side].append(timed(lambda writer=writer: writer.save_checkpoint(state, path)))
        if repeat % 2 == 1:  # the last write was the plain one: record this file's digest
            recorded.save_checkpoint(state, path)
        for side in ("hot", "cold"):
            digests._HASHED.clear()  # a file is hashed once per process: each check starts afresh
            if side == "cold":
                drop_pages(path)
            times[side].append(timed(lambda: digests.verify(path)))
        loads.append(os.getloadavg()[0])
    size_gb = path.stat().st_size / 2**30
    save_s = statistics.median(times["save"])
    load = f"load average {min(loads):.1f} to {max(loads):.1f}"
    rows = [
        Row(
            f"Checkpoint digest: write of a {size_gb:.2f} GiB state",
            "atomic save alone",
            save_s,
            "save + SHA-256 while writing + record",
            statistics.median(times["digest"]),
            "s",
            repeats=[d / s for d, s in zip(times["digest"], times["save"], strict=True)],
            note=f"AtomicCheckpointIO, 8 tensors; with the run record's two writes (one fsynced); {load}",
        )
    ]
    for side, label in (("hot", "from the page cache"), ("cold", "pages dropped first")):
        rows.append(
            Row(
                f"Checkpoint digest: check on load, {label}",
                "atomic save alone",
                save_s,
                "digests.verify (read + SHA-256)",
                statistics.median(times[side]),
                "s",
                repeats=[v / s for v, s in zip(times[side], times["save"], strict=True)],
                note=f"{size_gb:.2f} GiB; paired with the repeat's save; {load}",
            )
        )
    path.unlink()
    return rows


if __name__ == "__main__":  # python bench/checkpoint_digests.py: these rows alone
    from common import report

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        print(report(run(tiny="--tiny" in sys.argv, repeats=5, workdir=Path(folder)), began, "--tiny" in sys.argv))
