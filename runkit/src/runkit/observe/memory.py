"""Where training memory goes: parameters, gradients, optimizer state and activations, printed when fit starts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torch.optim import Optimizer

from ..protocol import example_input

ROWS = ("parameters", "gradients", "optimizer state", "activations")


def parameter_bytes(module: nn.Module) -> int:
    """Bytes of all parameters, trainable or frozen."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


def gradient_bytes(module: nn.Module) -> int:
    """Bytes of the gradients backward will allocate: one per trainable parameter, in its dtype."""
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def optimizer_state_bytes(optimizer: Optimizer) -> int | None:
    """Bytes of the state ``optimizer`` allocates at its first step (e.g. AdamW: 2x the parameters, plus steps).

    Found by stepping a copy whose parameters live on the meta device (no memory, no effect on training);
    ``None`` for an optimizer that cannot step that way (e.g. one that needs a closure).
    """
    try:
        groups = []
        for group in optimizer.param_groups:
            params = []
            for p in group["params"]:
                shadow = torch.empty_like(p, device="meta").requires_grad_(p.requires_grad)
                shadow.grad = torch.empty_like(shadow) if p.requires_grad else None
                params.append(shadow)
            # Fused and foreach kernels do not run on meta tensors; the state they keep is the same.
            groups.append({**group, "params": params, "foreach": False} | ({"fused": None} if "fused" in group else {}))
        shadow_optimizer = type(optimizer)(groups)  # type: ignore[call-arg]
        shadow_optimizer.step()
    except Exception:  # any optimizer or parameter type may be configured: say "n/a" rather than fail the run
        return None
    tensors = [t for state in shadow_optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    return sum(t.numel() * t.element_size() for t in tensors)


def activation_bytes(
    module: nn.Module, inputs: Tensor, forward_context: Callable[[], AbstractContextManager] | None = None
) -> int:
    """Bytes that one training-mode forward of ``inputs`` keeps for backward (parameters excluded).

    Counts each storage that autograd saves once; runs eagerly, restores the RNG and buffers (BatchNorm
    statistics), and touches no gradient, so training is unaffected.
    """
    parameters = {p.untyped_storage().data_ptr() for p in module.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    buffers = [b.detach().clone() for b in module.buffers()]
    modes = {m: m.training for m in module.modules()}
    devices = [inputs.device] if inputs.device.type == "cuda" else []
    context = forward_context() if forward_context is not None else torch.autocast("cpu", enabled=False)
    try:
        module.train()
        with (
            torch.random.fork_rng(devices=devices),
            torch.compiler.set_stance("force_eager"),
            torch.enable_grad(),
            context,
            torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        ):
            module(inputs)
    finally:
        for submodule, training in modes.items():
            submodule.training = training
        with torch.no_grad():
            for buffer, value in zip(module.buffers(), buffers, strict=True):
                buffer.copy_(value)
    return sum(saved.values())


def memory_budget(
    module: nn.Module,
    optimizers: Iterable[Optimizer],
    inputs: Tensor | None,
    forward_context: Callable[[], AbstractContextManager] | None = None,
) -> dict[str, int | None]:
    """The budget in bytes per row of ``ROWS``; ``None`` where it cannot be known.

    A module with lazy parameters (``nn.LazyLinear``, ...) has no sizes before its first forward: all ``None``.
    """
    if any(isinstance(p, nn.parameter.UninitializedParameter) for p in module.parameters()):
        return dict.fromkeys(ROWS)
    states = [optimizer_state_bytes(optimizer) for optimizer in optimizers]
    return {
        "parameters": parameter_bytes(module),
        "gradients": gradient_bytes(module),
        "optimizer state": None if None in states else sum(states),  # type: ignore[arg-type]
        "activations": None if inputs is None else activation_bytes(module, inputs, forward_context),
    }


def format_budget(budget: dict[str, int | None], title: str) -> str:
    """The budget as an aligned text table in MiB, with a total of the known rows."""
    lines = [title]
    for name, value in [*budget.items(), ("total", sum(v for v in budget.values() if v is not None))]:
        shown = "n/a" if value is None else f"{value / 2**20:12.2f} MiB"
        lines.append(f"  {name:<16}{shown:>16}")
    return "\n".join(lines)


class MemoryBudget(pl.Callback):
    """Prints the memory budget of the configured model, batch and precision once, when fit starts.

    Lightning's summary counts parameters only. Activations come from one measured forward of the
    ``protocol.example_input``, a batch of the configured shape; rows are per process (the local shards
    under a sharding strategy, which also leaves activations unmeasured).
    """

    def __init__(self) -> None:
        self.budget: dict[str, int | None] = {}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        example = example_input(trainer)
        example = None if example is None else example.to(pl_module.device)
        self.budget = memory_budget(pl_module, trainer.optimizers, example, trainer.precision_plugin.forward_context)
        batch = "n/a" if example is None else tuple(example.shape)
        title = f"Memory budget (precision {trainer.precision}, example input {batch}, per process):"
        rank_zero_info(format_budget(self.budget, title))
