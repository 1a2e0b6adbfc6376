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


def is_logging_step(trainer: pl.Trainer, step: int) -> bool:
    """Whether what is logged at optimizer step ``step`` (0-based) reaches the loggers.

    Lightning's rule for ``log_every_n_steps`` (its logger connector's, which is private): every n-th step,
    the step a run stops at, every step of ``fast_dev_run``; never with ``log_every_n_steps: 0``.
    """
    if trainer.fast_dev_run:
        return True
    every = trainer.log_every_n_steps
    return every > 0 and ((step + 1) % every == 0 or trainer.should_stop)


class ThroughputMonitor(callbacks.Callback):
    """Logs ``train/device/samples_per_sec`` and ``train/device/batches_per_sec`` at logging steps.

    Each rate covers the batches since the last one logged (at least ``window_size``), validation excluded.
    Lightning's ThroughputMonitor synchronises CUDA and updates its window at every batch (~0.2 ms a step on a
    CPU); this one adds up samples per batch, and reads the clock, synchronised, only when it logs.
    """

    def __init__(self, window_size: int = 10) -> None:
        """Configures the monitor.

        Args:
            window_size: Fewest batches a rate is averaged over; none is logged before that many batches.
        """
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size}")
        self.window_size = window_size
        self._start = self._paused = 0.0
        self._batches = self._samples = 0
        self._seen_step = -1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restart(trainer, pl_module)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._batches += 1
        self._samples += batch_size(batch)
        step = trainer.global_step  # optimizer steps so far; unchanged by an accumulating micro-batch
        if step == self._seen_step or self._batches < self.window_size or not is_logging_step(trainer, step - 1):
            self._seen_step = step
            return
        self._seen_step = step
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)  # the clock then covers the work queued on the device too
        elapsed = time.perf_counter() - self._start
        rates = {
            "train/device/samples_per_sec": self._samples / elapsed,
            "train/device/batches_per_sec": self._batches / elapsed,
        }
        # To the loggers, as Lightning's monitor does: `self.log` would repeat a stale rate at later logging steps.
        for logger in trainer.loggers:
            logger.log_metrics(rates, step=step - 1)  # the step just taken, where Lightning logs its metrics
        self._restart(trainer, pl_module)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._paused = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._start += time.perf_counter() - self._paused  # validation inside fit is not training time

    def _restart(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        self._start, self._batches, self._samples, self._seen_step = time.perf_counter(), 0, 0, trainer.global_step


class GradNormMonitor(callbacks.Callback):
    """Logs ``train/grad_norm``, the global L2 norm of the gradients before clipping, at every logging step.

    Computed only on steps whose metrics reach the loggers (``trainer.log_every_n_steps``): one norm is a pass
    over every gradient. Lightning offers ``utilities.grad_norm`` for a module to call itself; as a callback,
    every module gets it.
    """

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # Called after backward (and AMP unscaling) but before clipping: the norm of the raw gradients.
        if not is_logging_step(trainer, trainer.global_step):  # global_step: the steps done before this one
            return
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
