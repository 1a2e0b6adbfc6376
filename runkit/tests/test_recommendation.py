"""Which file of a quantized export is recommended: never a slower one, never a bigger one."""

from __future__ import annotations

from typing import Any

from support import submodule

recommendation = submodule("tools.recommendation")
SCORE = {"metric": "accuracy", "float_value": 90.0, "quantized_value": 89.8, "samples": 2000}


def timed(batch_1: float, batch_64: float) -> list[dict[str, float]]:
    return [{"batch_size": 1, "median_ms": batch_1}, {"batch_size": 64, "median_ms": batch_64}]


def float_file(runtime: str, batch_1: float, batch_64: float) -> dict[str, Any]:
    return {"runtime": runtime, "precision": "float", "latency": timed(batch_1, batch_64)}


def int8_file(batch_1: float, batch_64: float, size: int = 25, float_size: int = 100) -> dict[str, Any]:
    return {
        "runtime": "aoti",
        "precision": "int8",
        "latency": timed(batch_1, batch_64),
        "file_bytes": size,
        "float_file_bytes": float_size,
        "float_file": "model.aoti.pt2",
        "score": SCORE,
    }


def test_the_fastest_int8_file_faster_at_every_batch_size_is_recommended() -> None:
    files = {
        "model.onnx": float_file("onnxruntime", 0.2, 60.0),  # the fastest float file at batch 1
        "model.aoti.pt2": float_file("aoti", 0.4, 50.0),  # ... and at batch 64
        "model.int8_dynamic.onnx": int8_file(0.09, 25.5),  # 0.45x, 0.51x: better at its worst batch size
        "model.int8.aoti.pt2": int8_file(0.128, 15.0),  # 0.64x, 0.30x: better over both (geometric mean 0.44x)
    }
    recommended = recommendation.recommend(files)
    assert recommended["file"] == "model.int8.aoti.pt2"
    assert recommended["runtime"] == "aoti"
    assert recommended["latency_ratio"] == round((0.64 * 0.3) ** 0.5, 4)
    assert recommended["file_ratio"] == 0.25
    assert recommended["score"] == SCORE
    assert recommended["why"].startswith("ship model.int8.aoti.pt2 (aoti): 0.64x at batch 1, 0.30x at batch 64")


def test_an_int8_file_slower_at_one_batch_size_or_bigger_is_not_recommended() -> None:
    files = {
        "model.onnx": float_file("onnxruntime", 0.2, 60.0),
        "model.pt2": float_file("torch.export", 0.8, 70.0),
        "model.int8_dynamic.onnx": int8_file(0.3, 20.0),  # faster at batch 64, slower at batch 1
        "model.int8.aoti.pt2": int8_file(0.1, 15.0, size=120),  # faster, but bigger than its float file
    }
    recommended = recommendation.recommend(files)
    assert recommended["file"] == "model.onnx"  # the fastest float file
    assert recommended["latency_ratio"] == 1.0
    assert recommended["score"] is None
    assert recommended["why"] == (
        "ship model.onnx (onnxruntime, float: 1.00x at batch 1, 1.00x at batch 64 the fastest float time): no int8"
        " file is faster and smaller (model.int8_dynamic.onnx takes 1.50x at batch 1; model.int8.aoti.pt2 is 1.20x"
        " the size of model.aoti.pt2)"
    )


def test_without_int8_files_the_fastest_float_file_is_recommended_at_its_worst_ratio() -> None:
    files = {"model.onnx": float_file("onnxruntime", 0.2, 60.0), "model.aoti.pt2": float_file("aoti", 0.3, 30.0)}
    recommended = recommendation.recommend(files)
    assert recommended["file"] == "model.aoti.pt2"  # 1.5x and 1.0x against model.onnx's 1.0x and 2.0x
    assert recommended["latency_ratio"] == round(1.5**0.5, 4)
    assert recommended["why"].endswith("no int8 file held its checks")
