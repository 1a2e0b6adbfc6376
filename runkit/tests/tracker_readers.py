"""What each tracker holds, read back with its own reader: ``{metric: [(step, value), ...]}`` in logged order."""

from __future__ import annotations

import csv
import json
import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

Points = dict[str, list[tuple[int, float]]]


def tensorboard(run: Path) -> Points:
    """TensorBoard's ``EventAccumulator`` over every events file of the run, as TensorBoard reads a folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def csv_file(run: Path) -> Points:
    """``<run>/metrics.csv``, with Python's csv reader (empty cells are metrics not logged at that step)."""
    points: Points = defaultdict(list)
    with open(run / "metrics.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            step = int(row.pop("step"))
            for key, value in row.items():
                if value != "":
                    points[key].append((step, float(value)))
    return dict(points)


def mlflow(tracking_uri: str, run_id: str) -> Points:
    """The MLflow run's metric histories, from the MLflow client."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    keys = client.get_run(run_id).data.metrics
    histories = {key: client.get_metric_history(run_id, key) for key in keys}
    return {
        key: [(m.step, m.value) for m in sorted(h, key=lambda m: (m.timestamp, m.step))] for key, h in histories.items()
    }


def wandb_offline(run: Path) -> Points:
    """The history of every W&B offline session of the run (``<run>/wandb/offline-run-*/run-<id>.wandb``), oldest
    first, as ``wandb sync`` uploads them: W&B's own protobuf records, in its transaction log format (LevelDB's
    log: 32 KiB blocks of records, each a CRC, a length, a type and data), after a 7-byte header."""
    points: Points = defaultdict(list)
    for session in _wandb_sessions(run):
        for record in session:
            if record.WhichOneof("record_type") != "history":
                continue
            values = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
            }
            step = values.get("trainer/global_step")
            for key, value in values.items():
                if not key.startswith("_") and key != "trainer/global_step" and isinstance(value, (int, float)):
                    points[key].append((int(step), float(value)))
    return dict(points)


def wandb_config(run: Path) -> dict[str, Any]:
    """The config of the run's W&B offline sessions, as ``wandb sync`` uploads it: each session's first config (in
    its run record) and every update after it; W&B's own key ``_wandb`` left out."""
    config: dict[str, Any] = {}
    for session in _wandb_sessions(run):
        for record in session:
            kind = record.WhichOneof("record_type")
            if kind in ("run", "config"):
                for item in (record.run.config if kind == "run" else record.config).update:
                    config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    config.pop("_wandb", None)
    return config


def _wandb_sessions(run: Path) -> list[list[Any]]:
    """The records of each W&B offline session of the run (``<run>/wandb/offline-run-*/run-<id>.wandb``), oldest
    first, once the last has its exit record."""
    from wandb.proto import wandb_internal_pb2

    def records(file: Path) -> list[wandb_internal_pb2.Record]:
        found = []
        for data in _log_records(file.read_bytes()):
            found.append(wandb_internal_pb2.Record())
            found[-1].ParseFromString(data)
        return found

    files = sorted(run.glob("wandb/offline-run-*/run-*.wandb"))
    deadline = time.monotonic() + 30  # W&B's service writes the file after `finish()` returns: wait for its end
    while files and not any(r.WhichOneof("record_type") == "exit" for r in records(files[-1])):
        assert time.monotonic() < deadline, f"{files[-1]}: no exit record"
        time.sleep(0.05)
    return [records(file) for file in files]


def _log_records(blob: bytes) -> list[bytes]:
    assert blob[:4] == b":W&B", "not a W&B transaction log"
    records, pending, offset, block = [], b"", 7, 32768
    while offset + 7 <= len(blob):
        left = block - offset % block
        if left < 7:  # a block's trailer
            offset += left
            continue
        _crc, length, kind = struct.unpack("<IHB", blob[offset : offset + 7])
        data = blob[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == 0 and length == 0:  # zero padding at the end of the file
            break
        if kind == 1:  # FULL
            records.append(data)
        elif kind == 2:  # FIRST
            pending = data
        elif kind == 3:  # MIDDLE
            pending += data
        elif kind == 4:  # LAST
            records.append(pending + data)
    return records


def steps(points: Points, key: str) -> list[int]:
    return [step for step, _ in points.get(key, [])]
