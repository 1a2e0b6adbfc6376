"""The LR range test drawn: Lightning's plot as a PNG (with matplotlib), and the same curve in text for the terminal."""

from __future__ import annotations

import io
import math

from ..lightning_internals.tools import LRFinderResult
from ..store import RunPath


def save_lr_plot(finder: LRFinderResult, marked: int, path: RunPath) -> RunPath | None:
    """Lightning's plot of the loss against the LR, point ``marked`` in red, as a PNG; ``None`` without matplotlib."""
    try:
        from matplotlib.figure import Figure  # optional: not a dependency of the project
    except ImportError:
        return None
    figure = Figure(figsize=(6, 4), layout="tight")  # a bare Figure: no window, no pyplot state
    axes = figure.subplots()
    finder.plot(suggest=False, ax=axes)  # Lightning's `suggest=True` would mark its own suggestion
    axes.plot(finder.results["lr"][marked], finder.results["loss"][marked], marker="o", markersize=10, color="red")
    path.parent.mkdir(parents=True, exist_ok=True)
    image = io.BytesIO()  # one write: a store's object appears whole
    figure.savefig(image, dpi=100, format="png")
    path.write_bytes(image.getvalue())
    return path


def text_plot(
    lrs: list[float], losses: list[float], marked: int | None, width: int, height: int, log_x: bool = True
) -> str:
    """The loss (rows) against the LR (columns, log scale with ``log_x``) in text; point ``marked`` drawn as ``o``."""
    position = math.log10 if log_x else float
    points = [(i, position(x), y) for i, (x, y) in enumerate(zip(lrs, losses, strict=True)) if math.isfinite(y)]
    if not points:
        return "(no finite loss to plot)"
    x_low, x_high = min(p[1] for p in points), max(p[1] for p in points)
    y_low, y_high = min(p[2] for p in points), max(p[2] for p in points)
    rows = [[" "] * width for _ in range(height)]
    for index, x, y in points:
        column = round((x - x_low) / ((x_high - x_low) or 1.0) * (width - 1))
        row = height - 1 - round((y - y_low) / ((y_high - y_low) or 1.0) * (height - 1))
        if rows[row][column] != "o":
            rows[row][column] = "o" if index == marked else "*"
    labels = [f"{y_high:9.3g} |", *[" " * 9 + " |"] * (height - 2), f"{y_low:9.3g} |"] if height > 1 else ["loss |"]
    lines = [label + "".join(row) for label, row in zip(labels, rows, strict=True)]
    first, last = f"lr {lrs[0]:.1e}", f"{lrs[-1]:.1e}"
    axis = first + " " * max(1, width - len(first) - len(last)) + last
    return "\n".join([*lines, " " * 10 + "+" + "-" * width, " " * 11 + axis])
