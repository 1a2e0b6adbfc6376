"""Elastic resume: a run stopped on 2 processes resumes on 1, and one stopped on 1 resumes on 2, mid-epoch, training
the same samples at every step as a run that never stopped, with the same augmentation of each.

In ``make test``: the sampler's global batches on 1, 2 and 4 processes, augmentation per sample, what cannot be
elastic, the refusals (one process each), and 2 -> 1 (three runs: 2.5 min on a loaded 2-core machine). 1 -> 2 and 2 ->
2 with other worker counts (3.5 min more) are marked ``faults``: ``make test-faults``.

The runs are on a team's task (``elastic_task.py``: dict batches whose samples carry their index, augmentation from
torch's global RNG, SGD with momentum, a step-wise schedule): 192 samples, a global batch of 16 (8 per process on 2,
16 on 1), two epochs of 12 steps. Each stop is a group signal or a SIGKILL sent from outside the job, as a scheduler
sends it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from elastic_task import NumberedPoints, trained_steps
from support import CONFIGS, PACKAGE
from torch.utils.data import DataLoader, Dataset

from runkit.safety.digests import KEY
from runkit.safety.elastic import DataLayout, kept_batch_line, not_elastic, resume_line, saved_layout
from runkit.safety.resumable_data import make_resumable
from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, last_checkpoint, launch, refused, run_dir_flags

STEPS = 24  # 2 epochs x 192 samples / 16 per step
TASK = [  # explicit: jsonargparse carries the fixture model's `lr` and `dropout` over to this one
    "--model=elastic_task.NumberedRegressor",
    "--model.init_args.lr=0.05",
    "--model.init_args.dropout=0.0",  # masks drawn by each process (see test_dropout_...)
    "--data=elastic_task.NumberedData",
    f"--config={CONFIGS / 'training/ema.yaml'}",  # Lightning's EMAWeightAveraging: checkpoints hold the average
]
ON = {
    1: ["--trainer.devices=1", "--trainer.strategy=auto"],
    2: ["--trainer.devices=2", "--trainer.strategy=ddp"],
}
PER_PROCESS = {1: "--data.init_args.batch_size=16", 2: "--data.init_args.batch_size=8"}
WORKERS = {0: "--data.init_args.num_workers=0", 2: "--data.init_args.num_workers=2"}
# 2 processes against 1 sum the same gradients in another order (gloo's all-reduce of two halves against one mean).
# Measured on this 2-core VM after 24 steps, weights up to 1.55: max |dw| 3.0e-7 (2 -> 1 against 2 straight), 6.0e-8
# (1 -> 2 against 1 straight), 6.0e-7 (1 straight against 2 straight): a few float32 ulps (1.2e-7 at 1.5).
WEIGHT_BOUND = 2e-6


def steps_of(processes: int, batch: int = 16, size: int = 100, skip_batches: int = 0) -> list[list[int]]:
    """The samples of each step of one epoch over ``processes``, the global ``batch`` shared equally (after
    ``skip_batches`` steps trained elsewhere, as a resume continues)."""
    dataset = NumberedPoints(torch.zeros(size, 1), torch.zeros(size, 1), augment=False)
    per_rank = []
    for rank in range(processes):
        loader = DataLoader(dataset, batch_size=batch // processes, shuffle=True)
        (rebuilt,), _ = make_resumable([loader], seed=7, num_replicas=processes, rank=rank)
        rebuilt.load_state_dict({"epoch": 0, "batches": skip_batches, "seed": 7})
        per_rank.append([batch["index"].tolist() for batch in rebuilt])
    return [sorted(index for share in shares for index in share) for shares in zip(*per_rank, strict=True)]


@pytest.mark.parametrize("skip", [0, 3])
def test_the_global_batches_are_the_same_on_1_2_and_4_processes(skip: int) -> None:
    one = steps_of(1, skip_batches=skip)
    assert one == steps_of(2, skip_batches=skip) == steps_of(4, skip_batches=skip)
    assert [len(step) for step in one] == [16] * (6 - skip) + [4]  # 100 samples: the last step has the 4 left
    assert one == steps_of(1)[skip:]  # a resume on 4 continues what 1 process started
    assert sorted(index for step in steps_of(2) for index in step) == list(range(100))


def test_augmentation_follows_the_sample_not_the_batch_it_is_in() -> None:
    dataset = NumberedPoints(torch.zeros(64, 4), torch.zeros(64, 1), augment=True)
    inputs = {}
    for processes in (1, 2):
        loader = DataLoader(dataset, batch_size=16 // processes, shuffle=True)
        (rebuilt,), _ = make_resumable([loader], seed=3, num_replicas=processes, rank=0)
        seen = {index: x for batch in rebuilt for index, x in zip(batch["index"].tolist(), batch["x"], strict=True)}
        inputs[processes] = seen
    shared = inputs[1].keys() & inputs[2].keys()
    assert len(shared) == 32
    assert all(torch.equal(inputs[1][index], inputs[2][index]) for index in shared)
    assert not torch.equal(inputs[1][0], inputs[1][1])


class WholeBatches(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        return index

    def __getitems__(self, indices: list[int]) -> list[int]:
        return indices


class OwnGenerator(WholeBatches):
    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    __getitems__ = None  # type: ignore[assignment]


def test_what_cannot_be_elastic_is_named() -> None:
    loaders, kept = make_resumable([DataLoader(WholeBatches()), DataLoader(OwnGenerator())], seed=0)
    reasons = not_elastic(loaders, kept, sharded_by_user=False)
    assert reasons == [
        "WholeBatches fetches whole batches (__getitems__): its random draws follow each process's batch",
        "OwnGenerator.rng is a random generator of its own: its draws follow each process",
    ]
    plain, _ = make_resumable([DataLoader(list(range(8)), shuffle=True)], seed=0)  # a list: no attributes at all
    assert not_elastic(plain, [], sharded_by_user=False) == []
    assert not_elastic([], [], sharded_by_user=True) == [
        "the train data is sharded by the project (Trainer(use_distributed_sampler=False))"
    ]


def test_the_resume_line_says_what_stays_the_same_and_what_does_not() -> None:
    saved, now = DataLayout((16,), 2, per_sample=True), DataLayout((16,), 1, per_sample=True)
    assert resume_line(saved, now, [], dropout=0) == (
        "Resumed on 1 process(es) from 2: global batch 16 (16 per process), the same samples at every step as an"
        " uninterrupted run"
    )
    assert resume_line(saved, now, [], dropout=2).endswith(
        "; the model's 2 dropout layer(s) draw from each process's own RNG, so their masks (not the data) differ from"
        " an uninterrupted run's"
    )
    assert resume_line(saved, now, ["the train data is sharded by the project"], dropout=0) == (
        "Resumed on 1 process(es) from 2: global batch 16 (16 per process); not elastic: the train data is sharded by"
        " the project: the data from here differs from an uninterrupted run's"
    )


def test_a_global_batch_the_processes_cannot_share_is_refused_before_anything_is_written(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    run = in_tmp / "runs" / "fixture" / "one"
    run_cli("fit", *run_dir_flags(run), "--trainer.max_epochs=1", "--trainer.limit_train_batches=3")
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    line = refused(
        capsys,
        lambda: run_cli(
            "fit", *run_dir_flags(run), "--trainer.devices=3", "--trainer.strategy=ddp", "--ckpt_path=last"
        ),
    )
    assert line == (
        "error: --trainer.devices/--trainer.num_nodes: the run trains on global batches of 16 samples, which 3"
        " processes cannot share equally: resume on 1, 2, 4, 8, 16 processes"
    )
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


def test_a_checkpoint_of_runkit_0_1_resumes_on_its_own_process_count_only(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    run = in_tmp / "runs" / "fixture" / "old"
    run_cli("fit", *run_dir_flags(run), "--trainer.max_epochs=1", "--trainer.limit_train_batches=3")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    del checkpoint["callbacks"]["ExactResume"]["data"]  # as runkit 0.1 wrote it
    torch.save(checkpoint, run / "checkpoints" / "last.ckpt")
    record = yaml.safe_load((run / "provenance.yaml").read_text())
    del record[KEY]["checkpoints/last.ckpt"]  # changed on purpose: a file the run has no digest of loads unchecked
    (run / "provenance.yaml").write_text(yaml.safe_dump(record))
    line = refused(
        capsys,
        lambda: run_cli(
            "fit", *run_dir_flags(run), "--trainer.devices=2", "--trainer.strategy=ddp", "--ckpt_path=last"
        ),
    )
    assert "was written by runkit 0.1 on 1 process(es)" in line
    assert line.endswith("resume it on 1")


def fit(cwd: Path, run: Path, processes: int, session: int, *flags: str) -> tuple[int, str]:
    """``fit`` of the task on ``processes`` in its own session (a process group, as ``setsid`` makes it), recording
    what trained; returns the exit code and the output."""
    recorder = [
        "--trainer.callbacks+=elastic_task.TrainedSamples",
        f"--trainer.callbacks.directory={cwd / 'samples'}",
        f"--trainer.callbacks.session={session}",
    ]
    args = ["fit", "--trainer.accelerator=cpu", *run_dir_flags(run), *TASK, *ON[processes], *recorder, *flags]
    result = launch(PACKAGE, *args, cwd=cwd, wrapper=("setsid",), env={"OMP_NUM_THREADS": "1"})
    return result.returncode, result.stdout


def straight(cwd: Path, processes: int, workers: int = 2) -> Path:
    """An uninterrupted run of ``STEPS`` steps; returns its folder."""
    run = cwd / "runs" / "elastic" / "straight"
    code, out = fit(cwd, run, processes, 1, PER_PROCESS[processes], WORKERS[workers])
    assert code == 0, out[-4000:]
    return run


def stopped_then_resumed(cwd: Path, before: int, after: int, stop: list[str], code: int) -> tuple[Path, str]:
    """A run on ``before`` processes stopped by ``stop`` (its exit ``code``), resumed on ``after``; returns its folder
    and the resume's output."""
    run = cwd / "runs" / "elastic" / "resumed"
    stopped, out = fit(cwd, run, before, 1, PER_PROCESS[before], WORKERS[2], *stop)
    assert stopped == code, out[-4000:]
    assert 0 < last_checkpoint(run)["global_step"] < STEPS
    finished, out = fit(cwd, run, after, 2, PER_PROCESS[before], WORKERS[2], "--ckpt_path=last")
    assert finished == 0, out[-4000:]
    return run, out


@pytest.fixture(scope="module")
def two_to_one(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """2 processes stopped by a group SIGTERM at step 5, resumed on 1; and a straight run on 2."""
    cwd = tmp_path_factory.mktemp("two-to-one")
    term = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=5)
    run, out = stopped_then_resumed(cwd, 2, 1, [term], 128 + signal.SIGTERM)
    reference = tmp_path_factory.mktemp("straight-two")
    return {"cwd": cwd, "run": run, "out": out, "reference": reference, "straight": straight(reference, 2)}


@pytest.fixture(scope="module")
def one_to_two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """1 process killed (SIGKILL to its pid alone, nothing saved at the stop; its loader workers see their parent gone)
    at step 17, resumed on 2 from the step-16 checkpoint; and a straight run on 1."""
    cwd = tmp_path_factory.mktemp("one-to-two")
    kill = fault("SignalFromOutside", phase="train", signum=int(signal.SIGKILL), target="main", step=17)
    every = "--last_checkpoint.every_n_train_steps=4"
    run, out = stopped_then_resumed(cwd, 1, 2, [kill, every], -signal.SIGKILL)
    reference = tmp_path_factory.mktemp("straight-one")
    return {"cwd": cwd, "run": run, "out": out, "reference": reference, "straight": straight(reference, 1)}


def assert_same_samples(resumed: Path, uninterrupted: Path) -> None:
    """Every step trained the same samples, each with the same augmented input, and each epoch every sample once."""
    ours, theirs = trained_steps(resumed / "samples"), trained_steps(uninterrupted / "samples")
    assert list(ours) == list(range(STEPS)) == list(theirs)
    for step in range(STEPS):
        assert sorted(ours[step]) == sorted(theirs[step]), f"step {step}"
        assert ours[step] == theirs[step], f"step {step}: the same samples, augmented otherwise"
    for epoch in (0, 1):
        indices = [index for step in range(12 * epoch, 12 * (epoch + 1)) for index in ours[step]]
        assert sorted(indices) == list(range(192)), f"epoch {epoch}"


def max_weight_difference(run: Path, reference: Path) -> float:
    ours, theirs = last_checkpoint(run)["state_dict"], last_checkpoint(reference)["state_dict"]
    assert ours.keys() == theirs.keys()
    return max(float((ours[name] - theirs[name]).abs().max()) for name in ours)


def assert_trained_as_uninterrupted(found: dict[str, Any], before: int, after: int) -> None:
    """The resumed run of ``found`` against the uninterrupted one: the same samples at every step (augmented alike),
    weights within float reduction noise, the schedule and momentum carried over; said at the resume and recorded."""
    assert_same_samples(found["cwd"], found["reference"])
    resumed, reference = last_checkpoint(found["run"]), last_checkpoint(found["straight"])
    assert (resumed["global_step"], reference["global_step"]) == (STEPS, STEPS)
    difference = max_weight_difference(found["run"], found["straight"])
    assert difference <= WEIGHT_BOUND, f"max |dw| {difference:.3g}"
    # The optimizer's momentum and the schedule carried over: the LR halved every 8 steps, 3 times in 24.
    lr = resumed["optimizer_states"][0]["param_groups"][0]["lr"]
    assert lr == pytest.approx(0.05 / 8)
    torch.testing.assert_close(
        resumed["optimizer_states"][0]["state"][0]["momentum_buffer"],
        reference["optimizer_states"][0]["state"][0]["momentum_buffer"],
        rtol=1e-4,
        atol=WEIGHT_BOUND,
    )
    assert f"Resumed on {after} process(es) from {before}: global batch 16 ({16 // after} per process)" in found["out"]
    sessions = yaml.safe_load((found["run"] / "provenance.yaml").read_text())["sessions"]
    assert [s["devices"]["world_size"] for s in sessions] == [before, after]
    assert [s["data"]["per_process_batch"] for s in sessions] == [[16 // before], [16 // after]]
    assert [s["data"]["global_batch"] for s in sessions] == [[16], [16]]
    assert [s["data"]["elastic"] for s in sessions] == ["yes", "yes"]


# One test per case: under pytest-xdist a module fixture runs again in each worker that needs it.
def test_two_processes_stopped_by_a_group_sigterm_resume_on_one_as_if_uninterrupted(two_to_one: dict[str, Any]) -> None:
    assert_trained_as_uninterrupted(two_to_one, before=2, after=1)


@pytest.mark.faults
def test_one_process_killed_resumes_on_two_as_if_uninterrupted(one_to_two: dict[str, Any]) -> None:
    assert_trained_as_uninterrupted(one_to_two, before=1, after=2)


@pytest.mark.faults
def test_the_uninterrupted_order_is_the_same_on_one_process_and_two(
    two_to_one: dict[str, Any], one_to_two: dict[str, Any]
) -> None:
    assert_same_samples(one_to_two["reference"], two_to_one["reference"])
    assert max_weight_difference(one_to_two["straight"], two_to_one["straight"]) <= WEIGHT_BOUND


@pytest.mark.faults
def test_two_processes_resume_bit_exactly_with_another_worker_count(tmp_path: Path, two_to_one: dict[str, Any]) -> None:
    run = tmp_path / "runs" / "elastic" / "resumed"
    term = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=5)
    code, out = fit(tmp_path, run, 2, 1, PER_PROCESS[2], WORKERS[0], term)
    assert code == 128 + signal.SIGTERM, out[-4000:]
    code, out = fit(tmp_path, run, 2, 2, PER_PROCESS[2], WORKERS[2], "--ckpt_path=last")
    assert code == 0, out[-4000:]
    assert "Resumed on" not in out
    for key in ("state_dict", "optimizer_states", "lr_schedulers", "global_step"):
        assert_identical(last_checkpoint(run)[key], last_checkpoint(two_to_one["straight"])[key], key)


def test_a_resume_asking_for_another_batch_says_it_keeps_the_runs_one() -> None:
    unused = (
        "the train loader's batch_size 7 is not used: a run keeps its global batch (the saved position and the"
        " schedule count its batches); to train with another, start a run without --ckpt_path"
    )
    on_one, on_two = DataLayout((16,), 1, True, asked=(16,)), DataLayout((16,), 2, True)
    assert resume_line(on_one, on_two, [], 0, asked=[7]).endswith(f"; {unused}")  # another count: 8 per process
    assert "not used" not in resume_line(on_one, on_two, [], 0, asked=[16])  # the config's own 16: said as 8 each
    assert kept_batch_line(on_one, on_one, [16]) is None
    assert kept_batch_line(on_one, on_one, [7]) == (
        f"Resumed on 1 process(es) with the run's global batch 16 (16 per process); {unused}"
    )
    # Resumed 1 -> 2 once, then 2 -> 2 with the config's 16: the run's loaders asked 16, it was not changed.
    resumed_on_two = DataLayout((16,), 2, True, asked=(16,))
    assert kept_batch_line(resumed_on_two, on_two, [16]) is None
    assert "batch_size 7 is not used" in str(kept_batch_line(resumed_on_two, on_two, [7]))
    state = resumed_on_two.state()  # recorded in checkpoints (plain lists: weights_only)
    assert state == {"global_batches": [16], "processes": 2, "per_sample": True, "asked": [16]}
    assert saved_layout({"callbacks": {"ExactResume": {"rng": [{}], "data": state}}}) == resumed_on_two


@pytest.mark.faults  # ~60 s on 2 loaded cores: three runs of one process (make test has the line's unit test above)
def test_a_resume_with_another_batch_size_keeps_the_runs_global_batch_and_says_so(tmp_path: Path) -> None:
    # `--data.init_args.batch_size 7` on a resume on the same process count trained on with 7 instead of 16, without a
    # word: the saved position (batches of 16) then skipped 7-sample batches, and the run was no longer exact.
    term = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=5)
    run = tmp_path / "runs" / "elastic" / "resumed"
    stopped, out = fit(tmp_path, run, 1, 1, PER_PROCESS[1], WORKERS[2], term)
    assert stopped == 128 + signal.SIGTERM, out[-4000:]
    finished, out = fit(tmp_path, run, 1, 2, "--data.init_args.batch_size=7", WORKERS[2], "--ckpt_path=last")
    assert finished == 0, out[-4000:]
    lines = [line for line in out.splitlines() if "is not used: a run keeps its global batch" in line]
    assert len(lines) == 1, out[-4000:]
    assert (
        "Resumed on 1 process(es) with the run's global batch 16 (16 per process); the train loader's batch_size 7"
        in lines[0]
    )
    reference = tmp_path / "reference"
    reference.mkdir()
    assert last_checkpoint(run)["callbacks"]["ExactResume"]["data"]["asked"] == [16]  # the run's own, for the next
    uninterrupted = straight(reference, 1)
    assert_same_samples(tmp_path, reference)
    assert max_weight_difference(run, uninterrupted) == 0.0
