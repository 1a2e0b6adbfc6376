"""What a run shows: TensorBoard signals, model summary, memory budget, LR preview, profiler, progress bar."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from support import submodule
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from runkit.testing.support import run_dir_flags

EPOCHS, STEPS_PER_EPOCH = 2, 16  # fixture.yaml: 256 training sequences in batches of 16
RUN = Path("runs/fixture/shown")


@pytest.fixture(scope="session")
def memory() -> ModuleType:
    return submodule("observe.memory")


@pytest.fixture(scope="session")
def schedule_preview() -> ModuleType:
    return submodule("tools.schedule_preview")


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    (events,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})  # 0: keep every point
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_fit_shows_the_run(
    run_cli: Callable[..., object], cli: ModuleType, memory: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    fitted = run_cli("fit", *run_dir_flags(RUN))
    steps = EPOCHS * STEPS_PER_EPOCH
    logged = scalars(RUN)

    # The loss, the LR and the pre-clip gradient norm at every step (fixture.yaml logs every step); throughput
    # at the logging steps that end a window, the rate over the batches since the last one.
    for tag in ("train/loss_step", "train/grad_norm", "lr-AdamW"):
        assert [step for step, _ in logged[tag]] == list(range(steps)), tag
    assert {"train/loss_epoch", "val/loss"} <= logged.keys()
    window = 10  # monitoring.ThroughputMonitor's default
    for tag in ("train/device/samples_per_sec", "train/device/batches_per_sec"):
        assert [step for step, _ in logged[tag]] == list(range(window - 1, steps, window)), tag
    rates = zip(logged["train/device/samples_per_sec"], logged["train/device/batches_per_sec"], strict=True)
    assert all(samples > 0 and samples == pytest.approx(16 * batches) for (_, samples), (_, batches) in rates)  # of 16
    assert len(logged["perf/epoch_time_s"]) == EPOCHS
    assert "perf/peak_memory_gib" not in logged  # a CPU run (fixture.yaml); on CUDA: tests/task/test_gpu.py

    # The LR preview of the same config is the schedule fit ran (LearningRateMonitor logs before each step).
    preview = cli.build_cli([], run=False)
    rates = submodule("tools.schedule_preview").schedule(preview.trainer, preview.model, preview.datamodule)
    assert rates == pytest.approx([value for _, value in logged["lr-AdamW"]], rel=1e-6)

    # The summary has output shapes; the memory budget is printed, with exact parameter/gradient/AdamW rows.
    text = caplog.text  # Lightning's logger, which prints to stderr outside pytest
    assert "Out sizes" in text
    assert "[16, 1]" in text  # (batch, 1) outputs of the example batch built from the data's input_shape
    assert "optimizer state" in text.split("Memory budget", 1)[1]
    (budget_callback,) = [c for c in fitted.trainer.callbacks if isinstance(c, memory.MemoryBudget)]
    parameters = list(fitted.model.parameters())
    param_bytes = 4 * sum(p.numel() for p in parameters)
    assert budget_callback.budget["parameters"] == budget_callback.budget["gradients"] == param_bytes
    assert budget_callback.budget["optimizer state"] == 2 * param_bytes + 4 * len(parameters)  # moments + steps
    assert budget_callback.budget["activations"] > 0


def test_memory_budget_rows_are_exact(memory: ModuleType) -> None:
    network = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))  # 131 parameters
    batch = torch.zeros(2, 12)
    adamw = torch.optim.AdamW(network.parameters())
    assert memory.memory_budget(network, [adamw], batch) == {
        "parameters": 131 * 4,
        "gradients": 131 * 4,
        "optimizer state": 2 * 131 * 4 + 4 * 4,  # exp_avg and exp_avg_sq, plus one float32 step per tensor
        "activations": 2 * 12 * 4 + 2 * 8 * 4,  # the input (for the first weight's gradient) and the ReLU output
    }
    assert not adamw.state  # the real optimizer was not stepped
    momentum = torch.optim.SGD(network.parameters(), lr=0.1, momentum=0.9)
    assert memory.memory_budget(network, [momentum], None)["optimizer state"] == 131 * 4
    network[0].requires_grad_(False)  # frozen: parameters, but no gradients and no optimizer state
    assert memory.gradient_bytes(network) == (8 * 3 + 3) * 4
    assert memory.optimizer_state_bytes(torch.optim.LBFGS(network.parameters())) is None  # needs a closure


def test_memory_budget_of_lazy_modules_is_unknown_not_an_error(memory: ModuleType) -> None:
    network = nn.Sequential(nn.LazyLinear(3))
    assert memory.memory_budget(network, [torch.optim.AdamW(network.parameters())], torch.zeros(2, 5)) == dict.fromkeys(
        memory.ROWS
    )


def test_memory_budget_forward_leaves_training_untouched(memory: ModuleType) -> None:
    network = nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 3)))
    network.eval()
    network[2].train()  # a mix of modes, which the measurement must restore
    batch = torch.randn(4, 12)
    modes = [m.training for m in network.modules()]
    buffers = [b.clone() for b in network.buffers()]
    rng = torch.get_rng_state()
    assert memory.activation_bytes(network, batch) > batch.numel() * 4  # the input and more
    assert torch.equal(rng, torch.get_rng_state())  # dropout drew from a forked generator
    assert all(torch.equal(a, b) for a, b in zip(buffers, network.buffers(), strict=True))  # BatchNorm statistics
    assert [m.training for m in network.modules()] == modes
    assert all(p.grad is None for p in network.parameters())


@pytest.mark.parametrize(
    ("flags", "steps"),
    [
        ([], 2 * 16),  # 2 epochs x 16 batches
        (["--trainer.accumulate_grad_batches=3"], 2 * 6),  # ceil(16 / 3) optimizer steps per epoch
        (["--trainer.max_steps=5"], 5),
        (["--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp"], 2 * 8),  # data sharded
    ],
    ids=["epochs", "accumulation", "max_steps", "two-devices"],
)
def test_schedule_preview_counts_steps_like_fit(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], flags: list[str], steps: int
) -> None:
    run_cli("schedule", *flags)
    out = capsys.readouterr().out
    assert f"{steps} optimizer steps" in out
    assert f"{steps - 1:>8}  " in out  # the last step is listed
    assert not Path("runs").exists()  # a preview writes nothing


def test_schedule_preview_plot_shape(schedule_preview: ModuleType) -> None:
    preview = schedule_preview
    rates = [min(step / 10, 1.0) for step in range(50)]
    lines = preview.plot(rates, width=30, height=5).splitlines()
    assert len(lines) == 5 + 2  # rows, axis, labels
    assert all(len(line) == 11 + 30 for line in lines[:5])
    assert lines[0].rstrip().endswith("*" * 10)  # the plateau on the top row
    assert preview.key_steps(rates, points=3) == [0, 10, 24, 49]  # ends, middle, and the first peak


def test_profiler_writes_a_trace_and_a_self_time_table(
    run_cli: Callable[..., object], caplog: pytest.LogCaptureFixture
) -> None:
    profiler = [
        "--trainer.profiler=runkit.observe.profiling.Profiler",
        "--trainer.profiler.sort_by_key=self_cpu_time_total",
    ]
    run_cli("fit", *run_dir_flags(RUN), *profiler, "--trainer.max_steps=6", "--trainer.num_sanity_val_steps=0")
    (trace,) = RUN.glob("*training_step*.pt.trace.json")
    assert json.loads(trace.read_text())["traceEvents"]
    table = caplog.text.split("Profile stats for: records", 1)[1].split("Self CPU time total")[0]
    rows = [line.split() for line in table.splitlines() if line.rstrip().endswith(tuple("0123456789"))]
    self_cpu_percent = [float(row[-6].rstrip("%")) for row in rows]  # columns: self %, self, total %, ...
    assert len(self_cpu_percent) > 5
    assert self_cpu_percent == sorted(self_cpu_percent, reverse=True)


@pytest.mark.parametrize(
    ("env_ci", "tty", "flags", "bar"),
    [
        (None, True, [], True),
        (None, False, [], False),
        ("true", True, [], False),
        ("true", False, ["--trainer.enable_progress_bar=true"], True),
    ],
    ids=["terminal", "pipe", "ci", "explicit"],
)
def test_progress_bar_only_where_someone_watches(
    cli: ModuleType,
    in_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    env_ci: str | None,
    tty: bool,
    flags: list[str],
    bar: bool,
) -> None:
    if env_ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", env_ci)
    monkeypatch.setattr("sys.stderr.isatty", lambda: tty)
    built = cli.build_cli(["--trainer.enable_progress_bar=null", *flags], run=False)
    assert (built.trainer.progress_bar_callback is not None) == bar
