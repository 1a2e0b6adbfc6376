"""What a checkpoint in object storage costs against one on the local disk: the upload, and the extra time per save.

A state of 8 float32 tensors (64 MiB, or 256 MiB with ``--large``) goes through the kit's checkpoint plugin
(``AtomicCheckpointIO``, with the run's record keeping its digests, as ``fit`` has it) into a local run folder and
into one in S3, alternated;
S3 is moto's server on a loopback port (``$MOTO_SERVER``, else the repository's ``.venv-moto``: the one the tests
start), reached through s3fs as a job reaches its bucket. The upload alone (``StorePath.write_bytes`` of the same
bytes) is timed too: what the network and the server take, apart from serializing and hashing. Loopback has no
network latency or bandwidth limit: against a real bucket, the upload is the part that grows (size / bandwidth).

    python bench/object_storage.py            # 5 repeats
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from common import Row

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def s3_server() -> Iterator[None]:
    """moto's S3 server on a free loopback port, with a bucket ``bench``; the environment points s3fs at it."""
    command = os.environ.get("MOTO_SERVER") or str(REPO / ".venv-moto" / "bin" / "moto_server")
    if not Path(command).is_file():
        sys.exit(f"no moto_server ({command}): run `make setup` in the template repository, or set $MOTO_SERVER")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [command, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=url
    )
    try:
        for _ in range(600):
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/", timeout=2):
                break
            time.sleep(0.1)
        urllib.request.urlopen(urllib.request.Request(f"{url}/bench", method="PUT"), timeout=10).close()
        yield
    finally:
        server.terminate()
        server.wait(30)


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def writer(folder: Any) -> Any:
    """The kit's checkpoint plugin with the record of a run in ``folder`` keeping its digests, as ``fit`` has it."""
    checkpoint_io = importlib.import_module("runkit.safety.checkpoint_io")
    record = importlib.import_module("runkit.run.provenance").RunRecord(folder, writer=True)
    plugin = checkpoint_io.AtomicCheckpointIO()
    plugin.writing.append(record.checkpoint_writing)
    plugin.saved.append(record.checkpoint_saved)
    return plugin


def run(tiny: bool, large: bool, repeats: int, workdir: Path) -> list[Row]:
    store = importlib.import_module("runkit.store")
    numbers = 2**15 if tiny else 2**23 if large else 2**21  # per tensor: 128 KiB, 32 MiB or 8 MiB of float32
    state = {"state_dict": {f"layer{index}.weight": torch.randn(numbers) for index in range(8)}, "global_step": 1}
    local_run, remote_run = workdir / "run", store.location("s3://bench/runs/default/run")
    (local_run / "checkpoints").mkdir(parents=True)
    local, remote = writer(local_run), writer(remote_run)
    local_path, remote_path = local_run / "checkpoints" / "last.ckpt", remote_run / "checkpoints" / "last.ckpt"
    times: dict[str, list[float]] = {"local": [], "s3": [], "upload": []}
    loads = []
    for repeat in range(max(3, repeats)):
        for side in ("local", "s3") if repeat % 2 == 0 else ("s3", "local"):
            plugin, path = (local, local_path) if side == "local" else (remote, str(remote_path))
            times[side].append(timed(lambda plugin=plugin, path=path: plugin.save_checkpoint(state, path)))
        data = local_path.read_bytes()
        times["upload"].append(timed(lambda data=data: (remote_run / "upload.bin").write_bytes(data)))
        loads.append(os.getloadavg()[0])
    size = local_path.stat().st_size / 2**20
    load = f"load average {min(loads):.1f} to {max(loads):.1f}"
    extra = [s - local for s, local in zip(times["s3"], times["local"], strict=True)]
    return [
        Row(
            f"Checkpoint in S3 (moto, loopback): save of {size:.0f} MiB",
            "local disk (atomic save + digest)",
            statistics.median(times["local"]),
            "S3 (serialize + digest + record + upload)",
            statistics.median(times["s3"]),
            "s",
            repeats=extra,
            difference="s",
            note=f"extra per checkpoint: candidate - baseline per repeat; {load}",
        ),
        Row(
            f"Checkpoint in S3 (moto, loopback): the upload of {size:.0f} MiB alone",
            "local disk (atomic save + digest)",
            statistics.median(times["local"]),
            "one PUT of the bytes (StorePath.write_bytes)",
            statistics.median(times["upload"]),
            "s",
            note=f"{size / statistics.median(times['upload']):.0f} MiB/s to the server; {load}",
        ),
    ]


if __name__ == "__main__":  # python bench/object_storage.py [--large] [--tiny]
    from common import report

    began = time.perf_counter()
    tiny, large = "--tiny" in sys.argv, "--large" in sys.argv
    with tempfile.TemporaryDirectory(prefix="bench-") as folder, s3_server():
        rows = run(tiny=tiny, large=large, repeats=5, workdir=Path(folder))
        print(report(rows, began, tiny))
