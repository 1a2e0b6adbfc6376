"""Input validation before training: shapes, NaN/Inf pixels and label range, naming the split and sample.

A bad sample otherwise surfaces hours later as a NaN loss or a CUDA assert far from its cause. The
checks are vectorised over chunks of samples, so they run by default (timings in the README).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

_CHUNK = 8192  # samples checked at once: bounds the temporary memory for large sets
# How torch re-raises a DataLoader worker's error in the main process: the class is built again from this text.
_FROM_WORKER = re.compile(r"Caught (\w+) (in DataLoader worker process \d+)\.\nOriginal Traceback")


class InvalidDataError(ValueError):
    """A dataset split holds a sample the model cannot train on; the message names the split and index (or file).

    Raised in a DataLoader worker, torch re-raises it in the main process with the message "Caught InvalidDataError
    in DataLoader worker process 0." and the worker's traceback: the original message comes first again here, so
    the command's one ``error:`` line still names the sample.
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(_original_first(str(message)))


def _original_first(message: str) -> str:
    """A worker's error as torch re-raises it: the original message (the last ``<Class>: ...`` of the traceback,
    after any chained causes), then which worker; any other message as it is."""
    found = _FROM_WORKER.match(message)
    if found is None:
        return message
    starts = list(re.finditer(rf"^(?:[\w.]+\.)?{found[1]}: ", message, re.M))
    return f"{message[starts[-1].end() :].strip()} ({found[2]})" if starts else message


def check_samples(split: str, images: Tensor, labels: Tensor, num_classes: int, sample_shape: tuple[int, ...]) -> None:
    """Raises ``InvalidDataError`` at the first bad sample of ``split``.

    Args:
        split: Name of the split, for the message (``train``, ``val``, ...).
        images: ``(N, *sample_shape)`` floating-point samples.
        labels: ``(N,)`` integer class labels.
        num_classes: Labels must lie in ``[0, num_classes)``.
        sample_shape: The shape every sample must have, e.g. ``(C, H, W)``.
    """
    if tuple(images.shape[1:]) != tuple(sample_shape):
        raise InvalidDataError(
            f"{split} sample 0: shape {tuple(images.shape[1:])}, expected {tuple(sample_shape)} (and so are all"
            f" {len(images)} samples of the split)"
        )
    if labels.shape != (len(images),):
        raise InvalidDataError(f"{split}: labels have shape {tuple(labels.shape)}, expected ({len(images)},)")
    if not images.is_floating_point():
        raise InvalidDataError(f"{split}: samples are {images.dtype}, expected a floating-point dtype")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise InvalidDataError(f"{split}: labels are {labels.dtype}, expected an integer dtype")
    for start in range(0, len(images), _CHUNK):
        chunk = images[start : start + _CHUNK].flatten(1)  # (n, C*H*W)
        # A NaN or Inf makes its sample's sum non-finite. Summing (in at least float32) is several times faster
        # than testing every value; a finite sample whose sum overflows is told apart by the exact test.
        sums = chunk.sum(dim=1, dtype=torch.promote_types(chunk.dtype, torch.float32))  # (n,)
        for index in (~torch.isfinite(sums)).nonzero().flatten().tolist():
            if not bool(torch.isfinite(chunk[index]).all()):
                raise InvalidDataError(f"{split} sample {start + index}: contains NaN or Inf values")
    outside = (labels < 0) | (labels >= num_classes)  # (N,)
    if bool(outside.any()):
        index = int(outside.nonzero()[0])
        raise InvalidDataError(f"{split} sample {index}: label {int(labels[index])} is outside [0, {num_classes})")
