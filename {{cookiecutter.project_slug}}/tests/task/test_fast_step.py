"""The compiled variant's optimizer step: fused (one kernel), foreach where Lightning refuses fused, same updates.

Nothing here compiles: ``compile_network`` compiles in ``configure_model``, which these tests do not call.
"""

from __future__ import annotations

import functools
from types import ModuleType

import lightning.pytorch as pl
import torch

ADAMW = functools.partial(torch.optim.AdamW, lr=0.003, weight_decay=0.01)


def classifier_on(
    classifier: ModuleType, networks: ModuleType, compiled: bool, **trainer: object
) -> pl.LightningModule:
    torch.manual_seed(0)
    network = functools.partial(networks.ConvNet, widths=[4], dropout=0.0)  # the same forward on every model
    model = classifier.Classifier(network, optimizer=ADAMW, compile_network=compiled)
    model.trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, **trainer)
    return model


def step_kind(optimizer: torch.optim.Optimizer) -> tuple[object, object]:
    (group,) = optimizer.param_groups
    return group["fused"], group["foreach"]


def test_compiled_variant_steps_fused_with_the_configured_settings(
    classifier: ModuleType, networks: ModuleType
) -> None:
    eager = classifier_on(classifier, networks, compiled=False).configure_optimizers()
    fused = classifier_on(classifier, networks, compiled=True).configure_optimizers()
    assert step_kind(eager) == (None, None)  # PyTorch's default: a loop over the parameters on a CPU
    assert step_kind(fused) == (True, None)
    assert type(fused) is torch.optim.AdamW
    for key in ("lr", "weight_decay", "betas", "eps", "amsgrad"):
        assert fused.param_groups[0][key] == eager.param_groups[0][key], key


def test_clipping_under_mixed_precision_steps_foreach(classifier: ModuleType, networks: ModuleType) -> None:
    # lightning#21435: Lightning refuses a fused optimizer with clipping under mixed precision.
    model = classifier_on(classifier, networks, True, precision="bf16-mixed", gradient_clip_val=1.0)
    assert step_kind(model.configure_optimizers()) == (None, True)
    unclipped = classifier_on(classifier, networks, True, precision="bf16-mixed")
    assert step_kind(unclipped.configure_optimizers()) == (True, None)


def test_a_configured_step_kind_is_kept(classifier: ModuleType, networks: ModuleType) -> None:
    model = classifier_on(classifier, networks, compiled=True)
    model.optimizer_factory = functools.partial(ADAMW, foreach=False)
    assert step_kind(model.configure_optimizers()) == (None, False)


def test_eager_and_compiled_optimizer_states_resume_into_each_other(
    classifier: ModuleType, networks: ModuleType
) -> None:
    models = {compiled: classifier_on(classifier, networks, compiled) for compiled in (False, True)}
    optimizers = {compiled: model.configure_optimizers() for compiled, model in models.items()}
    images, labels = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    for compiled, model in models.items():  # one step each, from the same weights
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizers[compiled].step()
    states = {compiled: (models[compiled].state_dict(), optimizers[compiled].state_dict()) for compiled in models}
    for compiled, model in models.items():  # each resumes the other's state, and keeps its own step kind
        weights, optimizer_state = states[not compiled]
        model.load_state_dict(weights)
        optimizers[compiled].load_state_dict(optimizer_state)
        assert step_kind(optimizers[compiled]) == step_kind(optimizers[not compiled])  # the checkpoint's, for now
        model.trainer.strategy.optimizers = [optimizers[compiled]]
        model.on_train_start()
        assert step_kind(optimizers[compiled]) == ((True, None) if compiled else (None, None))
    for model, optimizer in zip(models.values(), optimizers.values(), strict=True):  # the same second step
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    for eager, fused in zip(models[False].parameters(), models[True].parameters(), strict=True):
        torch.testing.assert_close(eager, fused, rtol=1e-5, atol=1e-6)
