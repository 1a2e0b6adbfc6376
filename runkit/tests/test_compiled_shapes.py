"""A compiled network resumes exactly when its loader ends each epoch on a short batch (``drop_last=False``, the
DataLoader's default): both compile routes were ~1e-3 from an uninterrupted run (issue 33, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.demos import BoringModel
from support import PACKAGE, TESTS, submodule
from torch.utils.data import DataLoader, TensorDataset

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, last_checkpoint, launch, run_dir_flags

SAID = "Compiled network: the train loader's last batch is short (8 of 16)"


def test_a_short_last_batch_of_a_compiled_model_is_found() -> None:
    shapes = submodule("safety.compiled_shapes")
    data = TensorDataset(torch.zeros(120, 2))
    assert shapes._short_batches(DataLoader(data, batch_size=16)) == "8 of 16"
    assert shapes._short_batches(DataLoader(data, batch_size=16, drop_last=True)) is None
    assert shapes._short_batches(DataLoader(data, batch_size=8)) is None  # one size: the static graph is kept
    model = BoringModel()
    assert not shapes._compiled(model)
    model.layer.compile()  # nn.Module.compile: in place (nothing compiles before the first call)
    assert shapes._compiled(model)
    model = BoringModel()
    model.layer = torch.compile(model.layer)  # torch.compile's wrapper, as lightning-hydra-template's setup does
    assert shapes._compiled(model)


@pytest.mark.faults  # torch.compile: ~25 s a graph on this CPU, three processes
def test_a_compiled_network_with_a_short_last_batch_resumes_exactly(in_tmp: Path) -> None:
    # BatchNorm's batch reductions differ between a static and a dynamic graph: the resumed run's weights were 1.2e-3
    # from the uninterrupted run's. Each run in its own process: torch.compile's caches live as long as one.
    env = {submodule("project").DEFAULT_CONFIG_ENV: str(TESTS / "foreign.yaml")}
    args = ["--model=foreign.CompiledBatchNorm", "--data=foreign.HydraStyleData", "--data.train_size=120"]
    args += ["--data.num_workers=2", "--trainer.max_epochs=2"]
    straight, stopped = in_tmp / "runs/foreign/straight", in_tmp / "runs/foreign/stopped"
    done = launch(PACKAGE, "fit", *run_dir_flags(straight), *args, cwd=in_tmp, env=env)
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.count(SAID) == 1
    # Stopped in epoch 1, after epoch 0's short batch made the uninterrupted run compile its dynamic graph.
    stop = fault("SignalAtStep", step=10, signum=15)
    done = launch(PACKAGE, "fit", *run_dir_flags(stopped), *args, stop, cwd=in_tmp, env=env)
    assert done.returncode == 143, done.stdout[-3000:]
    resume = ["-c", str(stopped / "config.yaml"), "--ckpt_path=last", "--trainer.callbacks=[]"]
    done = launch(PACKAGE, "fit", *resume, cwd=in_tmp, env=env)
    assert done.returncode == 0, done.stdout[-3000:]
    expected, resumed = last_checkpoint(straight), last_checkpoint(stopped)
    for key in ("state_dict", "optimizer_states", "global_step"):
        assert_identical(resumed[key], expected[key], key)
