"""The fast optimizer step (``configure_optimization(..., fast_step=True)``, ``runkit.with_fast_step``): fused (one
kernel), foreach where Lightning refuses fused (clipping under mixed precision, lightning#21435), the same settings
and updates, a step kind the config chose kept, and checkpoints of either kind resumed by the other
(``runkit.keep_step_kinds``). Moved here from the generated project's tests, which re-checked it on the example.
"""

from __future__ import annotations

import functools
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import OptimizerCallable

import runkit

ADAMW = functools.partial(torch.optim.AdamW, lr=0.003, weight_decay=0.01)


class Module(pl.LightningModule):
    """A module as a team writes it: the optimizer callable as an argument, one line in configure_optimizers."""

    def __init__(self, optimizer: OptimizerCallable = ADAMW, fast_step: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)
        self.optimizer, self.fast_step = optimizer, fast_step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def configure_optimizers(self) -> Any:
        return runkit.configure_optimization(self, self.optimizer, fast_step=self.fast_step)

    def on_train_start(self) -> None:
        runkit.keep_step_kinds(self.trainer)


def attached(fast_step: bool, optimizer: OptimizerCallable = ADAMW, **trainer: object) -> Module:
    torch.manual_seed(0)  # the same weights for every module
    module = Module(optimizer, fast_step)
    module.trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, **trainer)
    return module


def step_kind(optimizer: torch.optim.Optimizer) -> tuple[object, object]:
    (group,) = optimizer.param_groups
    return group["fused"], group["foreach"]


def test_the_fast_step_is_fused_with_the_configured_settings() -> None:
    eager = attached(fast_step=False).configure_optimizers()
    fused = attached(fast_step=True).configure_optimizers()
    assert step_kind(eager) == (None, None)  # PyTorch's default: a loop over the parameters on a CPU
    assert step_kind(fused) == (True, None)
    assert type(fused) is torch.optim.AdamW
    for key in ("lr", "weight_decay", "betas", "eps", "amsgrad"):
        assert fused.param_groups[0][key] == eager.param_groups[0][key], key


def test_clipping_under_mixed_precision_steps_foreach() -> None:
    clipped = attached(True, precision="bf16-mixed", gradient_clip_val=1.0)
    assert step_kind(clipped.configure_optimizers()) == (None, True)
    assert step_kind(attached(True, precision="bf16-mixed").configure_optimizers()) == (True, None)


def test_a_configured_step_kind_is_kept() -> None:
    chosen = attached(True, functools.partial(ADAMW, foreach=False))
    assert step_kind(chosen.configure_optimizers()) == (None, False)


def test_eager_and_fused_optimizer_states_resume_into_each_other() -> None:
    modules = {fused: attached(fused) for fused in (False, True)}
    optimizers = {fused: module.configure_optimizers() for fused, module in modules.items()}
    inputs, targets = torch.randn(8, 4), torch.randint(0, 3, (8,))
    for fused, module in modules.items():  # one step each, from the same weights
        torch.nn.functional.cross_entropy(module(inputs), targets).backward()
        optimizers[fused].step()
    states = {fused: (modules[fused].state_dict(), optimizers[fused].state_dict()) for fused in modules}
    for fused, module in modules.items():  # each resumes the other's state, and keeps its own step kind
        weights, optimizer_state = states[not fused]
        module.load_state_dict(weights)
        optimizers[fused].load_state_dict(optimizer_state)
        assert step_kind(optimizers[fused]) == step_kind(optimizers[not fused])  # the checkpoint's, for now
        module.trainer.strategy.optimizers = [optimizers[fused]]
        module.on_train_start()
        assert step_kind(optimizers[fused]) == ((True, None) if fused else (None, None))
    for module, optimizer in zip(modules.values(), optimizers.values(), strict=True):  # the same second step
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(module(inputs), targets).backward()
        optimizer.step()
    for eager, fused in zip(modules[False].parameters(), modules[True].parameters(), strict=True):
        torch.testing.assert_close(eager, fused, rtol=1e-5, atol=1e-6)
