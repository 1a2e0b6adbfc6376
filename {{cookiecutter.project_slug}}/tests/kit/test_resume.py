"""Exact resume: a run killed (SIGKILL) or preempted (SIGTERM) and resumed ends bit-identical to one that never stopped.

The runs shuffle, augment in ``__getitem__``, use dropout and BatchNorm, warm up and decay the LR,
accumulate two batches per step and clip gradients: 3 optimizer steps per epoch, 9 in all.
"""

from __future__ import annotations

import importlib
import random
import signal
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from support import CONFIGS, PACKAGE, launch, run_dir_flags
from faults import fault
from torch.utils.data import Dataset, TensorDataset

resume = importlib.import_module(f"{PACKAGE}.resume")

SETUP = [
    f"--config={CONFIGS / 'default.yaml'}",
    f"--config={CONFIGS / 'debug/tiny.yaml'}",
    "--trainer.enable_progress_bar=false",
    "--trainer.max_epochs=3",
    "--trainer.limit_train_batches=6",
    "--trainer.accumulate_grad_batches=2",
    "--trainer.gradient_clip_val=0.5",
    "--model.scheduler.init_args.warmup_steps=3",
    "--trainer.limit_val_batches=1",
    "--data.init_args.image_size=16",  # small images and batches: the test is about state, not speed
    "--data.init_args.batch_size=16",
]
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")


def fit_in_process(cli: ModuleType, run: Path, *args: str) -> dict[str, Any]:
    cli.build_cli(["fit", *SETUP, *run_dir_flags(run), *args])
    return torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)


def resume_in_process(cli: ModuleType, run: Path, *args: str) -> dict[str, Any]:
    # Another global seed: a run that silently started over instead of resuming could not match.
    return fit_in_process(cli, run, *args, "--seed_everything=7", "--ckpt_path=last")


def assert_identical(actual: object, expected: object, where: str = "checkpoint") -> None:
    """Equal structure and bit-identical tensors."""
    assert type(actual) is type(expected), where
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected), where
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys(), where
        for key in expected:
            assert_identical(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), where
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_identical(a, e, f"{where}[{index}]")
    else:
        assert actual == expected, where


@pytest.fixture(scope="module")
def straight(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The final checkpoint of the run that is never interrupted."""
    checkpoint = fit_in_process(cli, tmp_path_factory.mktemp("straight") / "run", "--data.init_args.num_workers=0")
    assert checkpoint["global_step"] == 9
    return checkpoint


@pytest.mark.slow
@pytest.mark.parametrize(
    ("every_n_steps", "workers", "saved_step", "position"),
    [(None, 0, 3, {"epoch": 0, "batches": 6}), (2, 2, 4, {"epoch": 1, "batches": 2})],
    ids=["epoch-boundary", "mid-epoch"],
)
def test_sigkill_then_resume_is_bit_exact(
    cli: ModuleType,
    straight: dict[str, Any],
    tmp_path: Path,
    lightning_log: list[str],
    every_n_steps: int | None,
    workers: int,
    saved_step: int,
    position: dict[str, int],
) -> None:
    every_n = [f"--last_checkpoint.every_n_train_steps={every_n_steps}"] if every_n_steps else []
    killed = launch(
        PACKAGE,
        "fit",
        *SETUP,
        *run_dir_flags(tmp_path / "killed"),
        f"--data.init_args.num_workers={workers}",
        *every_n,
        fault("SignalAtStep", step=5),  # SIGKILL right after optimizer step 5
        cwd=tmp_path,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    saved = torch.load(tmp_path / "killed" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == saved_step
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [position]
    # Resume with the other worker count: the data, and so the result, must not depend on it.
    resumed = resume_in_process(cli, tmp_path / "killed", f"--data.init_args.num_workers={2 - workers}", *every_n)
    for key in EXACT:
        assert_identical(resumed[key], straight[key], key)
    assert any(line.startswith("Restored all states from the checkpoint at") for line in lightning_log)


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_and_exits_143(
    cli: ModuleType, straight: dict[str, Any], tmp_path: Path
) -> None:
    # SIGTERM arrives in the first of the two accumulated micro-batches of step 5: the step is completed first.
    stopped = launch(
        PACKAGE,
        "fit",
        *SETUP,
        *run_dir_flags(tmp_path / "run"),
        fault("SignalAtStep", step=4, signum=signal.SIGTERM, hook="start"),
        cwd=tmp_path,
    )
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    assert "Preemption: saved" in stopped.stdout
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 5
    resumed = resume_in_process(cli, tmp_path / "run")
    for key in EXACT:
        assert_identical(resumed[key], straight[key], key)


def test_sampler_resumes_inside_the_recorded_epoch_only(data: ModuleType) -> None:
    sampler = data.EpochSampler(range(10), num_replicas=1, rank=0, shuffle=True, seed=3)
    sampler.set_epoch(2)
    full = list(sampler)
    sampler.resume_at(epoch=2, offset=4)
    assert list(sampler) == full[4:]
    assert list(sampler) == full  # once only
    sampler.resume_at(epoch=1, offset=4)  # an epoch that is already over: nothing to skip
    assert list(sampler) == full


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_continues_from_its_saved_position(data: ModuleType, workers: int) -> None:
    def loader() -> Any:
        dataset = TensorDataset(torch.arange(40))
        sampler = data.EpochSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=0)
        sampler.set_epoch(1)
        # TensorDataset takes plain indices: strip the epoch from the sampler's (epoch, index) keys.
        return resume.ResumableLoader(
            _Indexed(dataset), batch_size=4, sampler=sampler, num_workers=workers, drop_last=True
        )

    first = loader()
    batches = iter(first)
    seen = [next(batches) for _ in range(3)]
    state = first.state_dict()
    assert state == {"epoch": 1, "batches": 3}
    rest = list(batches)
    second = loader()
    second.load_state_dict(state)
    continued = list(second)
    assert [b.tolist() for b in continued] == [b.tolist() for b in rest]
    assert second.state_dict() == {"epoch": 1, "batches": 10}
    assert len(seen) + len(continued) == 10


class _Indexed(Dataset):
    def __init__(self, dataset: TensorDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> torch.Tensor:
        return self.dataset[key[1]][0]


def test_rng_states_round_trip_through_a_weights_only_load(tmp_path: Path) -> None:
    state = resume.collect_rng_state()
    torch.save({"rng": state}, tmp_path / "state.pt")
    expected = (random.random(), np.random.rand(), torch.rand(3))
    loaded = torch.load(tmp_path / "state.pt", weights_only=True)["rng"]
    resume.restore_rng_state(loaded)
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(3), expected[2])
