"""What a run shows besides its losses and metrics: gradient norm, throughput, epoch time, peak memory, the summary.

Each class is a thin layer over the Lightning callback that does the job, adding only what it lacks here.
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch import callbacks

from ..protocol import example_input


def batch_size(batch: Any) -> int:
    """Samples in a batch: the length of its first tensor (``images`` of ``(images, labels)``)."""
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return len(first)


class ThroughputMonitor(callbacks.ThroughputMonitor):
    """Logs ``train/device/samples_per_sec`` (and batches, time) every logged step.

    Lightning's monitor, with the batch size read from ``(images, labels)`` batches: upstream takes a
    required ``batch_size_fn`` callable, and warns every run unless the module defines ``flops_per_batch``.
    """

    def __init__(self, window_size: int = 10) -> None:
        """Configures the monitor.

        Args:
            window_size: Batches the rates are averaged over; none are logged before that many batches.
        """
        super().__init__(batch_size_fn=batch_size, window_size=window_size)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        # FLOPs (and MFU) are reported only when the module defines `flops_per_batch`; without it, stay quiet.
        self._module_has_flops = hasattr(pl_module, "flops_per_batch")


class GradNormMonitor(callbacks.Callback):
    """Logs ``train/grad_norm``, the global L2 norm of the gradients before clipping, every optimizer step.

    Lightning offers ``utilities.grad_norm`` for a module to call itself; as a callback, every module gets it.
    """

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # Called after backward (and AMP unscaling) but before clipping: the norm of the raw gradients.
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if grads:
            pl_module.log("train/grad_norm", torch.nn.utils.get_total_norm(grads), on_step=True, on_epoch=False)


class EpochMonitor(callbacks.Callback):
    """Logs ``perf/epoch_time_s`` (wall time, validation included) and, on CUDA, ``perf/peak_memory_gib``.

    Lightning's ``Timer`` measures but does not log, and ``DeviceStatsMonitor`` logs dozens of allocator
    counters every step (and needs ``psutil`` on CPU); these are the two numbers worth a glance per epoch.
    """

    def __init__(self) -> None:
        self._start = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A run resumed mid-epoch starts without `on_train_epoch_start`: time that epoch from here.
        self._start = time.perf_counter()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = time.perf_counter()
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The slowest process sets the pace, the fullest device the limit.
        elapsed = time.perf_counter() - self._start
        pl_module.log("perf/epoch_time_s", elapsed, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="max")
        if pl_module.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(pl_module.device) / 2**30
            pl_module.log("perf/peak_memory_gib", peak, on_step=False, on_epoch=True, sync_dist=True, reduce_fx="max")


class ModelSummary(callbacks.ModelSummary):
    """Lightning's summary with layer output shapes and FLOPs for the ``protocol.example_input``, run eagerly.

    Upstream shows shapes only for a module that defines ``example_input_array``, whose shape is the
    data's; and its forward would compile one more graph (eval mode, no grad) of a compiled network.
    """

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        defined = pl_module.example_input_array
        if defined is None:
            pl_module.example_input_array = example_input(trainer)
        try:
            with torch.compiler.set_stance("force_eager"):
                super().on_fit_start(trainer, pl_module)
        finally:
            pl_module.example_input_array = defined
