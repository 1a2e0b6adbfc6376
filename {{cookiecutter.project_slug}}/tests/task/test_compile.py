"""Eager and compiled: a compiled fit, checkpoints that load both ways, and no recompilation once running."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from runkit.testing import probes
from support import CONFIGS, SMALL_RUN

pytestmark = pytest.mark.slow  # compiling costs tens of seconds on a CPU
NETWORK = {"depth": 1, "dim": 32}  # a small transformer: fewer kernels to compile
EPOCHS, STEPS_PER_EPOCH, BATCH = 3, 4, 32  # debug.yaml's loaders


@pytest.fixture(scope="module")
def compiled(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, int, Path]]:
    """A compiled fit of the transformer (in this process, so the compiler's counters are visible)."""
    run_dir = tmp_path_factory.mktemp("compiled")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(run_dir)
        before = probes.graphs_compiled()
        built = cli.build_cli(
            [
                "fit",
                *[
                    f"--config={CONFIGS / name}.yaml"
                    for name in (
                        "default",
                        *SMALL_RUN,
                        "example/transformer",
                        "example/compile",
                    )
                ],
                *[f"--model.network.init_args.{key}={value}" for key, value in NETWORK.items()],
                f"--trainer.max_epochs={EPOCHS}",
                "--trainer.callbacks+=runkit.testing.probes.GraphCounter",
                "--trainer.enable_progress_bar=false",
            ]
        )
        yield built, before, Path(built.trainer.log_dir, "checkpoints")


def eager_classifier(networks: ModuleType, classifier: ModuleType, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return classifier.Classifier(functools.partial(networks.TransformerClassifier, **NETWORK)).eval()


def outputs(model: torch.nn.Module, seed: int = 0) -> torch.Tensor:
    images = torch.randn(BATCH, 1, 28, 28, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():  # as validation inside `fit`, so its compiled graph is reused
        return model(images)


def test_compiled_fit_trains_and_keeps_checkpoint_keys(
    compiled: tuple, networks: ModuleType, classifier: ModuleType
) -> None:
    built, _, checkpoints = compiled
    assert built.model.network._compiled_call_impl is not None  # compiled in place
    assert built.trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    assert torch.isfinite(built.trainer.callback_metrics["train/loss_epoch"])
    state = torch.load(checkpoints / "last.ckpt", weights_only=True)["state_dict"]
    assert set(state) == set(eager_classifier(networks, classifier, 0).state_dict())  # no `_orig_mod.` prefixes


def test_no_recompilation_after_the_first_step(compiled: tuple) -> None:
    built, before, _ = compiled
    after_step = probes.find(built.trainer, probes.GraphCounter).after_step
    assert len(after_step) == EPOCHS * STEPS_PER_EPOCH
    # One graph for training, one for evaluation (built in the sanity check); then nothing new.
    assert after_step[0] - before == 2
    assert after_step == [after_step[0]] * len(after_step)


def test_eager_and_compiled_checkpoints_load_into_each_other(
    compiled: tuple, networks: ModuleType, classifier: ModuleType, tmp_path: Path
) -> None:
    built, _, checkpoints = compiled
    compiled_model = built.model.eval()
    graphs = probes.graphs_compiled()

    eager = eager_classifier(networks, classifier, seed=0)  # compiled checkpoint -> eager model
    eager.load_state_dict(torch.load(checkpoints / "last.ckpt", weights_only=True)["state_dict"])
    torch.testing.assert_close(outputs(eager), outputs(compiled_model), rtol=1e-5, atol=1e-5)

    other = eager_classifier(networks, classifier, seed=1)  # eager checkpoint -> compiled model
    assert not torch.allclose(outputs(other), outputs(compiled_model))
    torch.save({"state_dict": other.state_dict()}, tmp_path / "eager.ckpt")
    compiled_model.load_state_dict(torch.load(tmp_path / "eager.ckpt", weights_only=True)["state_dict"])
    torch.testing.assert_close(outputs(compiled_model), outputs(other), rtol=1e-5, atol=1e-5)
    assert probes.graphs_compiled() == graphs  # loading weights rebuilt nothing
