"""How float32 matrix multiplications run on a CUDA GPU: ``torch.set_float32_matmul_precision`` as a setting.

PyTorch's default, ``highest``, runs them in full float32 even on GPUs with tensor cores (Ampere and later),
and Lightning warns about it at every start. ``high`` lets them use TensorFloat32: inputs rounded to 10
mantissa bits, products accumulated in float32, several times the throughput. Training is the case it is made
for: cuDNN already runs float32 convolutions this way by default (``torch.backends.cudnn.allow_tf32``), and
bf16-mixed rounds the same inputs harder (7 bits). ``medium`` allows bfloat16 inputs; ``highest`` is for work
that needs every bit (linear algebra, checking against a reference).
"""

from __future__ import annotations

from typing import Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback

Float32MatmulPrecision = Literal["highest", "high", "medium"]


class MatmulPrecision(Callback):
    """Sets the float32 matmul precision for a run on a machine with CUDA, and restores it when the run ends.

    A machine without CUDA keeps PyTorch's setting: since torch 2.9 the same switch also reaches oneDNN's CPU
    matmuls, and CPU runs here are the ones compared bit for bit (resume, eager against compiled).
    """

    def __init__(self, float32: Float32MatmulPrecision = "high") -> None:
        """Sets the precision.

        Args:
            float32: ``torch.set_float32_matmul_precision``'s setting: ``highest`` (full float32), ``high``
                (TensorFloat32 on tensor cores), ``medium`` (bfloat16 inputs).
        """
        self.float32 = float32
        self._previous = torch.get_float32_matmul_precision()
        # Now, when the CLI builds the run: Lightning checks the setting (and warns) as it sets up the device,
        # before the first callback hook.
        self._apply()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._apply()  # again, for a second run of the same objects in one process

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        torch.set_float32_matmul_precision(self._previous)

    def _apply(self) -> None:
        if torch.cuda.is_available():
            torch.set_float32_matmul_precision(self.float32)


def unless_configured(callbacks: list[Callback]) -> list[Callback]:
    """``[MatmulPrecision()]`` (``high``), unless ``trainer.callbacks`` holds one: every run gets the setting once."""
    return [] if any(isinstance(callback, MatmulPrecision) for callback in callbacks) else [MatmulPrecision()]
