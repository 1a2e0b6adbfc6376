"""Which file of a quantized export to ship: among the int8 files that hold the accuracy bound, are no bigger than the
float file of their format and are faster than the fastest float file at every batch size timed, the fastest (the
geometric mean of its ratios over the batch sizes); else the fastest float file. Never a slower file, never a bigger
one, said in one line with the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def latency_ratios(files: Mapping[str, dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Per file and batch size: its median latency over the fastest float file's at that batch size."""
    fastest: dict[int, float] = {}
    for entry in files.values():
        if entry["precision"] == "float":
            for row in entry["latency"]:
                size = row["batch_size"]
                fastest[size] = min(fastest.get(size, float("inf")), row["median_ms"])
    return {
        name: {row["batch_size"]: row["median_ms"] / fastest[row["batch_size"]] for row in entry["latency"]}
        for name, entry in files.items()
    }


def recommend(files: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"file", "runtime", "latency_ratio", "file_ratio", "score", "why"}`` for the file to ship.

    ``files``: file name -> its entry in ``quantization.json`` (``precision``, ``runtime``, ``latency`` rows, and for
    an int8 file ``file_bytes``, ``float_file_bytes`` and ``score``). ``latency_ratio`` is the geometric mean of the
    file's ratios against the fastest float file at each batch size timed; ``file_ratio`` its whole size over the
    float file of its format's.
    """
    ratios = latency_ratios(files)
    worst = {name: max(by_size.values()) for name, by_size in ratios.items()}
    mean = {name: math.prod(by_size.values()) ** (1 / len(by_size)) for name, by_size in ratios.items()}
    floats = [name for name, entry in files.items() if entry["precision"] == "float"]
    int8 = [name for name, entry in files.items() if entry["precision"] != "float"]
    if not floats:
        raise ValueError("recommend: no float file was timed to compare the int8 files with")
    best_float = min(floats, key=mean.__getitem__)
    faster = [name for name in int8 if worst[name] < 1 and _file_ratio(files[name]) <= 1]
    if faster:
        chosen = min(faster, key=mean.__getitem__)
        entry = files[chosen]
        sizes = ", ".join(f"{ratio:.2f}x at batch {size}" for size, ratio in sorted(ratios[chosen].items()))
        why = (
            f"ship {chosen} ({entry['runtime']}): {sizes} the time of the fastest float file,"
            f" {_file_ratio(entry):.2f}x the size of {entry['float_file']}, {_score_text(entry['score'])}"
        )
        return _recommendation(chosen, entry, mean[chosen], _file_ratio(entry), entry["score"], why)
    entry = files[best_float]
    reasons = [_not_chosen(name, files[name], ratios[name]) for name in int8]
    sizes = ", ".join(f"{ratio:.2f}x at batch {size}" for size, ratio in sorted(ratios[best_float].items()))
    why = f"ship {best_float} ({entry['runtime']}, float: {sizes} the fastest float time)"
    held = f"no int8 file is faster and smaller ({'; '.join(reasons)})" if reasons else "no int8 file held its checks"
    why += f": {held}"
    return _recommendation(best_float, entry, mean[best_float], 1.0, None, why)


def _recommendation(
    name: str, entry: Mapping[str, Any], latency: float, size: float, score: object, why: str
) -> dict[str, Any]:
    return {
        "file": name,
        "runtime": entry["runtime"],
        "latency_ratio": round(latency, 4),
        "file_ratio": round(size, 4),
        "score": score,
        "why": why,
    }


def _file_ratio(entry: Mapping[str, Any]) -> float:
    return entry["file_bytes"] / max(entry["float_file_bytes"], 1)


def _not_chosen(name: str, entry: Mapping[str, Any], ratios: Mapping[int, float]) -> str:
    slower = [f"{ratio:.2f}x at batch {size}" for size, ratio in sorted(ratios.items()) if ratio >= 1]
    if slower:
        return f"{name} takes {', '.join(slower)}"
    return f"{name} is {_file_ratio(entry):.2f}x the size of {entry['float_file']}"


def _score_text(score: Mapping[str, Any]) -> str:
    if score["metric"] == "accuracy":
        return f"val accuracy {score['quantized_value']:.2f}% (float {score['float_value']:.2f}%)"
    return f"relative RMS error {score['quantized_value']:.3g} against float on the validation set"
