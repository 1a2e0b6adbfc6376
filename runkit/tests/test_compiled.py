"""A network compiled in place (``runkit.compile_in_place`` in ``configure_model``) trains without recompiling after
its first step, and its checkpoints keep the eager keys, so eager and compiled models load each other's. Moved here
from the generated project's tests, which re-checked it on the example. Compiling costs tens of seconds cold on a CPU:
marked ``faults`` (``make test-faults``)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from fixture_task import SequenceRegressor
from torch import nn

import runkit
from runkit.testing import probes
from runkit.testing.support import run_dir_flags

pytestmark = [pytest.mark.slow, pytest.mark.faults]
EPOCHS, STEPS_PER_EPOCH = 2, 16  # the fixture's 256 sequences in batches of 16: every batch one shape


class Network(nn.Module):
    """The fixture's layers in a module of this file: torch.compile skips a frame in torch's own files (Sequential)."""

    def __init__(self, layers: nn.Module) -> None:
        super().__init__()
        self.layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class CompiledRegressor(SequenceRegressor):
    """The fixture's model, its network compiled in place once the Trainer has it."""

    def configure_model(self) -> None:
        self.net = eager_network(self.net)
        runkit.compile_in_place(self.net)


def eager_network(layers: nn.Module) -> nn.Module:
    return layers if isinstance(layers, Network) else Network(layers)


def eager_model(seed: int) -> SequenceRegressor:
    torch.manual_seed(seed)
    model = SequenceRegressor()
    model.net = eager_network(model.net)
    return model.eval()


@pytest.fixture(scope="module")
def compiled(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[object, int, Path]:
    """A compiled fit (in this process, so the compiler's counters are visible): the CLI, graphs before, the run."""
    run = tmp_path_factory.mktemp("compiled") / "run"
    before = probes.graphs_compiled()
    built = cli.build_cli(
        [
            "fit",
            f"--model={__name__}.CompiledRegressor",
            f"--trainer.max_epochs={EPOCHS}",
            "--trainer.callbacks+=runkit.testing.probes.GraphCounter",
            *run_dir_flags(run),
        ]
    )
    return built, before, run


def test_compiled_in_place_trains_without_recompiling_after_the_first_step(compiled: tuple) -> None:
    built, before, _ = compiled
    assert built.model.net._compiled_call_impl is not None  # compiled in place
    after_step = probes.find(built.trainer, probes.GraphCounter).after_step
    assert len(after_step) == EPOCHS * STEPS_PER_EPOCH
    # One graph for training, one for evaluation (built in the sanity check); then nothing new.
    assert after_step[0] - before == 2
    assert after_step == [after_step[0]] * len(after_step)


def test_eager_and_compiled_checkpoints_load_into_each_other(compiled: tuple, tmp_path: Path) -> None:
    built, _, run = compiled
    compiled_model = built.model.eval()
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    eager = eager_model(seed=0)
    assert set(state) == set(eager.state_dict())  # no `_orig_mod.` prefixes
    graphs = probes.graphs_compiled()
    inputs = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    eager.load_state_dict(state)  # compiled checkpoint -> eager model
    with torch.no_grad():
        torch.testing.assert_close(eager(inputs), compiled_model(inputs), rtol=1e-5, atol=1e-5)
        other = eager_model(seed=1)  # eager weights -> compiled model
        assert not torch.allclose(other(inputs), compiled_model(inputs))
        compiled_model.load_state_dict(other.state_dict())
        torch.testing.assert_close(compiled_model(inputs), other(inputs), rtol=1e-5, atol=1e-5)
    assert probes.graphs_compiled() == graphs  # loading weights rebuilt nothing
