"""Instruments that tests attach to runs: callbacks that record what happened, and readers for the results.

Callbacks are named by class path on the command line (``--trainer.callbacks+=runkit.testing.probes.RankRecorder``),
so the processes of a DDP run import them too.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import Tensor, nn
from torch.optim import Optimizer


def read_scalars(run_dir: Path | str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the run's TensorBoard events: ``{tag: [(step, value), ...]}`` in logging order.

    A resumed run adds an events file; files are read in the order they were created.
    """
    scalars: dict[str, list[tuple[int, float]]] = {}
    files = sorted(Path(run_dir).glob("events.out.tfevents.*"), key=lambda path: int(path.name.split(".")[3]))
    assert files, f"no TensorBoard events in {run_dir}"
    for events in files:
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})  # 0: keep every event
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((event.step, event.value) for event in accumulator.Scalars(tag))
    return scalars


def find(trainer: pl.Trainer, kind: type) -> Any:
    """The one callback of type ``kind`` the trainer holds."""
    (callback,) = [c for c in trainer.callbacks if isinstance(c, kind)]  # type: ignore[attr-defined]
    return callback


class InitialWeights(pl.Callback):
    """Keeps a copy of the model's parameters as training starts."""

    def __init__(self) -> None:
        self.parameters: dict[str, Tensor] = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.parameters = {name: p.detach().clone() for name, p in pl_module.named_parameters()}


class GradientRecorder(pl.Callback):
    """Records the global grad norm before clipping and, as the optimizer step used them, after it."""

    def __init__(self) -> None:
        self.before: list[float] = []  # global L2 norm, before clipping
        self.after: list[float] = []  # global L2 norm of the gradients the optimizer step used
        self.after_max: list[float] = []  # their largest absolute element

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A post-hook: Lightning runs backward and clipping inside `optimizer.step(closure)`, and the
        # step leaves `.grad` as it found it, so afterwards the gradients are exactly what it used.
        for optimizer in trainer.optimizers:
            optimizer.register_step_post_hook(self._record_after)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self.before.append(float(torch.nn.utils.get_total_norm(_grads(optimizer))))

    def _record_after(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        grads = _grads(optimizer)
        self.after.append(float(torch.nn.utils.get_total_norm(grads)))
        self.after_max.append(max(float(g.abs().max()) for g in grads))


def _grads(optimizer: Optimizer) -> list[Tensor]:
    return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


class OutputDtypeRecorder(pl.Callback):
    """Records the dtype of the network's output (the logits) in every training step: the module's ``network``
    attribute, or the module's own ``forward`` where it has none."""

    def __init__(self) -> None:
        self.dtypes: set[torch.dtype] = set()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        network = getattr(pl_module, "network", pl_module)
        network.register_forward_hook(lambda module, args, output: self.dtypes.add(output.dtype))


class GraphCounter(pl.Callback):
    """Records how many graphs ``torch.compile`` has built in this process after every training step."""

    def __init__(self) -> None:
        self.after_step: list[int] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.after_step.append(graphs_compiled())


def graphs_compiled() -> int:
    """Graphs built by ``torch.compile`` so far in this process (recompilations included)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class RankRecorder(pl.Callback):
    """Writes ``<directory>/rank<N>.json``: what this process trained on and the metrics it ended with.

    Per epoch: the targets of the batches this process trained on (``batch[1]``, flattened: they name the
    samples). Per step: this process's own loss. At the end: the epoch metrics as this process sees them.
    """

    def __init__(self, directory: str = ".") -> None:
        """Configures the recorder.

        Args:
            directory: Where the per-process JSON files go.
        """
        self.directory = Path(directory)
        self.record: dict[str, Any] = {"epochs": [], "step_losses": []}

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.record["num_workers"] = trainer.train_dataloader.num_workers
        loaders = {"train": trainer.train_dataloader, "val": trainer.val_dataloaders}
        self.record["start_methods"] = {stage: start_method(loader) for stage, loader in loaders.items()}
        self.record["epochs"].append({"targets": []})

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, *args: Any
    ) -> None:
        self.record["epochs"][-1]["targets"].extend(batch[1].flatten().tolist())
        self.record["step_losses"].append(float(outputs["loss"]))

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.record["world_size"] = trainer.world_size
        self.record["metrics"] = {key: float(value) for key, value in trainer.callback_metrics.items()}
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / f"rank{trainer.global_rank}.json").write_text(json.dumps(self.record))


def start_method(loader: Any) -> str | None:
    """How ``loader`` starts its workers (``fork``, ``forkserver``, ``spawn``), or ``None`` without workers."""
    if getattr(loader, "num_workers", 0) == 0:
        return None
    context = loader.multiprocessing_context
    return context.get_start_method() if context is not None else torch.multiprocessing.get_start_method()


class _NanBackward(torch.autograd.Function):
    """Identity forward; its backward returns NaN."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return torch.full_like(grad, float("nan"))


class NanGradientNet(nn.Module):
    """A linear classifier with a finite forward and a NaN backward: what ``detect_anomaly`` must catch."""

    def __init__(self, num_classes: int = 10, input_shape: tuple[int, ...] = (1, 28, 28)) -> None:
        """Builds the network.

        Args:
            num_classes: Number of output logits.
            input_shape: Shape of one input.
        """
        super().__init__()
        self.linear = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return _NanBackward.apply(self.linear(x.flatten(1)))  # (B, num_classes)


class MatmulPrecisionRecorder(pl.Callback):
    """Records the float32 matmul precision as training starts."""

    def __init__(self) -> None:
        self.seen = ""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.seen = torch.get_float32_matmul_precision()
