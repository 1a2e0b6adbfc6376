"""``sweep``: every combination of presets and values is a run, one table compares them over seeds, a failing cell
is its one line, bad input is refused before any cell runs, and the same command again continues."""

from __future__ import annotations

import csv
import importlib.util
import math
import os
import signal
import statistics
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml
from support import submodule

from runkit.testing.support import digest

optuna = pytest.importorskip("optuna", reason="the sweep needs the project's `search` extra (Optuna)")

SWEEP = Path("runs/fixture/sweep")
PRESETS = {
    "small.yaml": {"model": {"init_args": {"hidden": 8}}},
    "wide.yaml": {"model": {"init_args": {"hidden": 48}}},
    # A preset the config accepts and fit refuses: torch.nn.Linear raises when the model is built.
    "broken.yaml": {"model": {"init_args": {"hidden": -4}}},
    # A loss that turns non-finite at the first steps: the non-finite stop ends the cell.
    "diverges.yaml": {"model": {"init_args": {"lr": 1.0e30, "optimizer": "sgd"}}},
    # Code that raises in the middle of training.
    "crashes.yaml": {"model": {"class_path": "crashing.CrashingRegressor"}},
}
CRASHING = '''
import fixture_task


class CrashingRegressor(fixture_task.SequenceRegressor):
    """Raises at its third training step."""

    def training_step(self, batch, batch_idx):
        if self.global_step == 2:
            raise RuntimeError("the third step broke\\nsecond line")
        return super().training_step(batch, batch_idx)
'''


def sweep(cli: ModuleType, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs ``sweep *args`` in this process: its exit code, stdout and stderr."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sweep", *args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture
def presets(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, content in PRESETS.items():
        (in_tmp / "configs" / name).parent.mkdir(exist_ok=True)
        (in_tmp / "configs" / name).write_text(yaml.safe_dump(content))
    (in_tmp / "crashing.py").write_text(CRASHING)
    monkeypatch.syspath_prepend(str(in_tmp))
    return in_tmp


def load_study(name: str = "sweep", folder: Path = SWEEP) -> optuna.Study:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "study.log")))
    return optuna.load_study(study_name=name, storage=storage)


def values(folder: Path = SWEEP) -> dict[str, float]:
    """Each complete cell's monitored metric (its best value over the run, as its best checkpoint holds it)."""
    complete = optuna.trial.TrialState.COMPLETE
    return {t.user_attrs["cell"]: t.value for t in load_study(folder.name, folder).get_trials() if t.state == complete}


def test_axes_cells_and_their_names() -> None:
    grid = submodule("search.grid")
    assert grid.split_values("1,2") == ["1", "2"]
    assert grid.split_values("[8,16],[16, 32],{'a': 1, 'b': 2}") == ["[8,16]", "[16, 32]", "{'a': 1, 'b': 2}"]
    assert grid.split_values("'x,y',z") == ["'x,y'", "z"]
    axes = grid.read_axes(["seed_everything=1,2", {"model.init_args.widths": [[8, 16], [16, 32]]}], lambda key: key)
    assert [(a.name, a.items, a.labels) for a in axes] == [
        ("seed_everything", ("1", "2"), ("1", "2")),
        ("widths", ("[8, 16]", "[16, 32]"), ("8-16", "16-32")),
    ]
    assert [cell.name for cell in grid.cells(axes)] == [
        "seed_everything=1,widths=8-16",
        "seed_everything=1,widths=16-32",
        "seed_everything=2,widths=8-16",
        "seed_everything=2,widths=16-32",
    ]
    assert axes[1].arguments("16-32") == ["--model.init_args.widths=[16, 32]"]
    assert grid.count(axes) == 4


def test_a_group_axis_is_its_files_and_an_empty_item_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    grid = submodule("search.grid")
    monkeypatch.chdir(tmp_path)
    for path in ("configs/precision/bf16.yaml", "configs/a/x.yaml", "configs/b/x.yaml"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("trainer: {}\n")
    (axis,) = grid.read_axes([",configs/precision/bf16.yaml"], lambda key: key)
    assert (axis.name, axis.labels, axis.key) == ("precision", ("none", "bf16"), "")
    assert axis.arguments("none") == []
    assert axis.arguments("bf16") == ["--config=configs/precision/bf16.yaml"]
    (axis,) = grid.read_axes([["configs/a/x.yaml", "configs/b/x.yaml"]], lambda key: key)  # YAML: a list
    assert (axis.name, axis.labels) == ("config", ("configs-a-x", "configs-b-x"))  # stems alone would collide


def test_gpu_shares_give_each_worker_its_own_gpus() -> None:
    launch = submodule("search.launch")
    assert launch.gpu_shares(["0", "1", "2", "3"], 2) == [["0", "1"], ["2", "3"]]
    assert launch.gpu_shares(["0", "1", "2"], 2) == [["0"], ["1"]]  # never two workers on one GPU
    assert launch.gpu_shares(["4", "6"], 2) == [["4"], ["6"]]  # the GPUs CUDA_VISIBLE_DEVICES names
    assert launch.gpu_shares([], 3) == [[], [], []]  # no GPU: nothing pinned
    with pytest.raises(ValueError, match="--workers 3: this machine shows 2 GPU"):
        launch.gpu_shares(["0", "1"], 3)
    assert launch.visible_gpus("cpu") == []  # a config that trains on the CPU takes no GPU


@pytest.mark.gpu
def test_workers_on_one_gpu_are_refused_and_a_worker_trains_on_its_own(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus = torch.cuda.device_count()
    grid = ["--grid=configs/small.yaml,configs/wide.yaml", "--trainer.accelerator=gpu", "--trainer.max_epochs=1"]
    code, _, err = sweep(cli, capsys, *grid, f"--workers={gpus + 1}")
    assert code == 2
    assert f"error: --workers {gpus + 1}: this machine shows {gpus} GPU(s)" in err
    assert not Path("runs").exists()
    code, _out, err = sweep(cli, capsys, *grid, f"--workers={gpus}")
    assert code == 0, err[-3000:]
    for run in (SWEEP / "small", SWEEP / "wide"):
        devices = yaml.safe_load((run / "provenance.yaml").read_text())["sessions"][0]["devices"]
        assert (devices["accelerator"], devices["world_size"]) == ("cuda", 1)


def test_dry_run_prints_each_cell_s_fit_command_and_writes_nothing(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = digest(presets)
    args = ["--trainer.max_epochs=1", "--grid", "configs/small.yaml,configs/wide.yaml", "--grid", "seed_everything=1,2"]
    code, out, err = sweep(cli, capsys, *args, "--dry_run=true")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "sweep runs/fixture/sweep: 4 cells; each runs:"
    assert lines[1] == (
        "small,seed_everything=1: fixture_cli fit --config=configs/small.yaml --trainer.max_epochs=1"
        " --seed_everything=1 --trainer.default_root_dir=runs/fixture --run.experiment=sweep"
        " --run.name=small,seed_everything=1"
    )
    assert [line.split(":")[0] for line in lines[2:]] == [
        "small,seed_everything=2",
        "wide,seed_everything=1",
        "wide,seed_everything=2",
    ]
    assert digest(presets) == before


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (
            ["--grid=configs/small.yaml,configs/missing.yaml"],
            "--grid configs/small.yaml,configs/missing.yaml: configs/missing.yaml: no such config file",
        ),
        (
            ["--grid=model.init_args.hiden=8,16"],
            "--grid model.init_args.hiden: no such config key; did you mean model.init_args.hidden?",
        ),
        (["--grid=seed_everything="], "--grid seed_everything=: an empty axis; list the values of seed_everything"),
        (["--grid=,"], "--grid ',': an empty axis; list config files"),
        ([], "--grid: nothing to sweep"),
        (
            ["--grid=model.init_args.hidden=8,wide"],
            "--grid model.init_args.hidden=8,wide: model.init_args.hidden=wide:",
        ),
        (["--grid=run.name=a,b"], "--grid run.name: set by the sweep itself"),
        (["--grid=seed_everything=1,1"], "--grid seed_everything=1,1: a value is given twice"),
        (
            ["--grid=configs/small.yaml,configs/notyaml.yaml"],
            "--grid configs/small.yaml,configs/notyaml.yaml: configs/notyaml.yaml:",
        ),
        (
            [
                f"--grid=seed_everything={','.join(map(str, range(40)))}",
                "--grid=model.init_args.hidden=" + ",".join(str(8 * n) for n in range(1, 27)),
            ],
            "--grid: 1040 cells (40 x 26) is more than --max_cells 1000; give --max_cells 1040 to run them all",
        ),
        (["--grid=seed_everything=1,2", "--table=true"], "no sweep 'sweep' in runs/fixture/sweep yet: run it without"),
    ],
    ids=[
        "missing-file",
        "unknown-key",
        "empty-values",
        "empty-group",
        "no-axis",
        "refused-value",
        "reserved",
        "twice",
        "bad-preset",
        "too-many",
        "no-table-yet",
    ],
)
def test_bad_input_is_one_error_line_before_any_cell_runs(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str], grid: list[str], message: str
) -> None:
    Path("configs/notyaml.yaml").write_text("model:\n  init_args:\n    nope: 1\n")
    before = digest(presets)
    code, out, err = sweep(cli, capsys, *grid)
    assert code == 2, out[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-2000:]
    assert errors[0].startswith(f"error: {message}"), errors
    assert digest(presets) == before  # nothing written: no sweep folder, no journal


def test_cells_are_runs_the_table_averages_seeds_and_failed_cells_are_one_line_each(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str], run_cli: Callable[..., object]
) -> None:
    groups = "configs/small.yaml,configs/broken.yaml,configs/diverges.yaml,configs/crashes.yaml"
    args = ["--grid", groups, "--grid", "seed_everything=1,2", "--trainer.max_epochs=1"]
    code, out, err = sweep(cli, capsys, *args)
    assert code == 1, err[-3000:]  # every cell ran; some failed
    assert "sweep runs/fixture/sweep: 8 cells (4 x 2), 1 worker(s); val/loss (minimize)" in out
    # Each complete cell is an ordinary run named after its cell, in the sweep's folder.
    for seed in (1, 2):
        run = SWEEP / f"small,seed_everything={seed}"
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert (config["seed_everything"], config["model"]["init_args"]["hidden"]) == (seed, 8)
        assert (config["trainer"]["max_epochs"], config["run"]["name"]) == (1, run.name)
        assert yaml.safe_load((run / "provenance.yaml").read_text())["sessions"][0]["status"] == "finished"
    # `validate -c <cell>/config.yaml --ckpt_path best` scores the cell's best checkpoint.
    cell = SWEEP / "small,seed_everything=1"
    validated = run_cli("validate", f"--config={cell / 'config.yaml'}", "--ckpt_path=best")
    assert validated.trainer.callback_metrics["val/loss"].item() == pytest.approx(values()[cell.name])
    # `runs` lists every cell; the sweep's last lines say how.
    listing = submodule("run.folders").format_runs(SWEEP.parent, "sweep")
    assert sum(f"small,seed_everything={seed}" in listing for seed in (1, 2)) == 2
    every = submodule("run.folders").format_runs(Path("runs")).splitlines()  # plain `runs`: the sweep's folder too
    assert sum(line.startswith("fixture/sweep  small,seed_everything=") for line in every) == 2
    assert f"the cells' runs: fixture_cli runs --root {SWEEP.parent} --experiment sweep" in out
    # The table: a row per preset; mean and std over the two seeds; failed cells with their one line.
    scores = [values()[f"small,seed_everything={seed}"] for seed in (1, 2)]
    with open(SWEEP / "results.csv") as file:
        table = {row["configs"]: row for row in csv.DictReader(file)}
    assert list(table) == ["small", "broken", "diverges", "crashes"]
    small = table["small"]
    assert (small["n"], small["cells"]) == ("2", "2")
    assert float(small["val/loss mean"]) == pytest.approx(statistics.fmean(scores), rel=1e-6)
    assert float(small["val/loss std"]) == pytest.approx(statistics.stdev(scores), rel=1e-5)
    assert small["best"] == f"small,seed_everything={1 + scores.index(min(scores))}"
    assert float(small["train/loss mean"]) > 0  # every other final metric too
    for name in ("broken", "diverges", "crashes"):
        assert table[name]["n"] == "0"
    assert "model" in table["broken"]["failed"]
    assert "-4" in table["broken"]["failed"]
    crash_line = "crashes,seed_everything=1: RuntimeError: the third step broke"
    assert crash_line in table["crashes"]["failed"]
    assert "non-finite" in table["diverges"]["failed"] or "nan" in table["diverges"]["failed"].lower()
    lines = out.splitlines()
    assert f"failed  {crash_line}" in lines
    assert sum(line.startswith("failed  ") for line in lines) == 6
    assert (SWEEP / "results.md").read_text().startswith("| configs | n | cells | val/loss mean | val/loss std |")
    assert "Traceback" in (SWEEP / "crashes,seed_everything=1" / "fit.log").read_text()  # kept with its run

    # The same command again: complete cells are not trained again; failed ones run again (a preset may be fixed).
    complete = {seed: digest(SWEEP / f"small,seed_everything={seed}") for seed in (1, 2)}
    Path("configs/broken.yaml").write_text(yaml.safe_dump({"model": {"init_args": {"hidden": 16}}}))
    code, _, err = sweep(cli, capsys, *args)
    assert code == 2
    assert (
        "error: sweep 'sweep' in runs/fixture/sweep/study.log was started with another grid, metric or fit config"
        in err
    )
    Path("configs/broken.yaml").write_text(yaml.safe_dump(PRESETS["broken.yaml"]))
    code, out, _ = sweep(cli, capsys, *args)
    assert code == 1
    assert "6 failed cell(s) run again" in out
    assert {seed: digest(SWEEP / f"small,seed_everything={seed}") for seed in (1, 2)} == complete
    trials = load_study().get_trials()
    by_cell = [t.user_attrs["cell"] for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(by_cell) == ["small,seed_everything=1", "small,seed_everything=2"]  # each once
    # The table on demand: the same rows, nothing trained.
    code, shown, _ = sweep(cli, capsys, *args, "--table=true")
    assert code == 0
    assert [line for line in shown.splitlines() if line.startswith("small")] == [
        line for line in out.splitlines() if line.startswith("small")
    ]


def test_a_sweep_yaml_holds_the_grid_and_what_every_cell_changes(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("sweep.yaml").write_text(
        yaml.safe_dump(
            {
                "trainer": {"max_epochs": 1},
                "grid": [["configs/small.yaml", None], {"model.init_args.dropout": [0.0, 0.3]}],
                "run": {"name": "presets"},
            }
        )
    )
    code, shown, _ = sweep(cli, capsys, "--config=sweep.yaml", "--grid=seed_everything=3", "--dry_run=true")
    assert code == 0
    assert shown.splitlines()[1] == (
        "note: sweep.yaml holds the sweep's own keys (grid, ...), which fit does not read: to paste a command, give it"
        " a copy of that file without them"
    )
    assert len(shown.splitlines()) == 2 + 4
    code, _out, err = sweep(cli, capsys, "--config=sweep.yaml", "--grid=seed_everything=3")
    assert code == 0, err[-3000:]
    folder = SWEEP.with_name("presets")
    names = sorted(path.name for path in folder.iterdir() if path.is_dir())
    assert names == [
        "none,dropout=0.0,seed_everything=3",
        "none,dropout=0.3,seed_everything=3",
        "small,dropout=0.0,seed_everything=3",
        "small,dropout=0.3,seed_everything=3",
    ]
    config = yaml.safe_load((folder / "none,dropout=0.3,seed_everything=3" / "config.yaml").read_text())
    init = config["model"]["init_args"]
    assert (init["hidden"], init["dropout"], config["seed_everything"], config["trainer"]["max_epochs"]) == (
        32,
        0.3,
        3,
        1,
    )  # the class default where the group's item is none; the key's value typed (a float)
    cell = yaml.safe_load((folder / "none,dropout=0.3,seed_everything=3" / "cell.yaml").read_text())
    assert "grid" not in cell
    assert "workers" not in cell
    with open(folder / "results.csv") as file:
        assert [row["configs"] + "/" + row["dropout"] for row in csv.DictReader(file)] == [
            "small/0.0",
            "small/0.3",
            "none/0.0",
            "none/0.3",
        ]


def sweep_plan(*grid_flags: str) -> Any:
    """The plan of a sweep of the fixture's ``SWEEP`` over ``grid_flags`` (``--grid`` values), monitoring val/loss."""
    axes = tuple(submodule("search.grid").read_axes(list(grid_flags), lambda key: key))
    settings = {"heartbeat_interval": 10, "grace_period": 60, "optuna_config": {}}
    cells = math.prod(len(axis.labels) for axis in axes)
    return submodule("search.cell").SweepPlan(
        "sweep", None, SWEEP, SWEEP / "base.yaml", axes, "val/loss", "minimize", cells, **settings,
        project=submodule("project").Project(), axes=axes,
    )  # fmt: skip


def test_the_table_of_a_running_sweep_shows_each_cell_where_it_stands(in_tmp: Path) -> None:
    cell, grid, results = submodule("search.cell"), submodule("search.grid"), submodule("search.results")
    plan = sweep_plan("model.hidden=8,16", "seed_everything=1,2")
    axes = plan.axes
    study = optuna.create_study(sampler=cell.GridOfCells([a.name for a in axes], [list(a.labels) for a in axes]))

    def started() -> tuple[optuna.Trial, str]:
        trial = study.ask()
        params = {axis.name: trial.suggest_categorical(axis.name, list(axis.labels)) for axis in axes}
        return trial, plan.cell_of(params).name

    done, done_name = started()
    done.set_user_attr("metrics", {"train/loss": 2.0})
    study.tell(done, 0.25)
    failed, failed_name = started()
    failed.set_user_attr("error", "RuntimeError: boom")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    _, running_name = started()  # a worker runs it now
    found = results.rows(plan, results.cell_results(study, plan))
    text = results.table(plan, found).splitlines()
    assert text[0].split() == ["hidden", "n", "val/loss", "best", "s/cell"]
    assert f"failed  {failed_name}: RuntimeError: boom" in text
    assert text[-1] == "still to run: 1 running, 1 not started"
    row = next(row for row in found if row.best == done_name)
    assert (row.n, row.means, row.stds) == (
        1,
        {"val/loss": 0.25, "train/loss": 2.0},
        {"val/loss": None, "train/loss": None},
    )
    written = [path.name for path in results.write_results(plan, found)]
    has_plot = importlib.util.find_spec("matplotlib") is not None
    assert written == ["results.csv", "results.md", *(["results.png"] if has_plot else [])]
    if has_plot:  # the monitored metric per row, with error bars: a PNG image
        assert (SWEEP / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {running_name, failed_name, done_name} <= {c.name for c in grid.cells(list(axes))}


def test_a_seed_whose_metric_is_not_finite_gives_a_nan_spread_and_the_table_goes_on(in_tmp: Path) -> None:
    results = submodule("search.results")
    plan = sweep_plan("seed_everything=1,2")
    axes = plan.axes
    study = optuna.create_study()  # the grid's sampler stops the study at its last cell, outside an objective
    for label, loss in zip(axes[0].labels, (float("inf"), 2.0), strict=True):  # one seed diverged
        study.enqueue_trial({"seed_everything": label})
        trial = study.ask()
        trial.suggest_categorical("seed_everything", list(axes[0].labels))
        trial.set_user_attr("metrics", {"val/mae": loss, "val/acc": 0.5})
        study.tell(trial, 0.25)
    (row,) = results.rows(plan, results.cell_results(study, plan))
    assert row.means["val/mae"] == float("inf")
    assert math.isnan(row.stds["val/mae"])
    assert (row.means["val/acc"], row.stds["val/acc"]) == (0.5, 0.0)
    assert "nan" in results.table(plan, [row])
    assert [path.name for path in results.write_results(plan, [row])][:2] == ["results.csv", "results.md"]


def test_the_same_command_on_a_finished_sweep_trains_nothing_and_prints_the_table(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--grid=configs/small.yaml,configs/wide.yaml", "--trainer.max_epochs=1"]
    code, first, err = sweep(cli, capsys, *args)
    assert code == 0, err[-3000:]
    cells = {name: digest(SWEEP / name) for name in ("small", "wide")}

    def no_workers(*args: object) -> int:
        raise AssertionError("workers started for a finished sweep")

    monkeypatch.setattr(submodule("search.sweep_command"), "run_workers", no_workers)
    code, again, _ = sweep(cli, capsys, *args, "--workers=2")  # the workers are the command's, not the sweep's
    assert code == 0
    assert not [line for line in again.splitlines() if line.startswith("cell ")]
    table = [line for line in again.splitlines() if line.startswith(("small ", "wide "))]
    assert table == [line for line in first.splitlines() if line.startswith(("small ", "wide "))]
    assert {name: digest(SWEEP / name) for name in ("small", "wide")} == cells


def test_without_optuna_the_sweep_is_one_line_naming_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else found(name, *a))
    with pytest.raises(SystemExit) as exit_info:
        submodule("search.sweep").main(["--grid=seed_everything=1,2"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: `sweep` needs Optuna: pip install the project's `search` extra (pip install -e '.[search]')\n"
    )


def test_a_sigterm_before_a_cell_s_fit_is_ready_stops_that_cell_at_its_first_step_saved(
    cli: ModuleType, presets: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's SIGTERM handler holds a signal that comes while a cell's config is parsed and its model built;
    # the cell then trained to its end (an hour, on real runs) before the worker exited 143.
    cell = submodule("search.cell")
    real = cell.fit_trial

    def sigterm_first(*args: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # lands in the worker's handler: no fit handler yet
        real(*args)

    monkeypatch.setattr(cell, "fit_trial", sigterm_first)
    args = ["--grid=configs/small.yaml,configs/wide.yaml", "--trainer.max_epochs=2"]
    code, out, _ = sweep(cli, capsys, *args)
    assert code == 143
    (stopped,) = [line.split()[1] for line in out.splitlines() if line.endswith("it resumes when the sweep runs again")]
    last = torch.load(SWEEP / stopped / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 0  # at its first safe point, before any of its steps
    monkeypatch.setattr(cell, "fit_trial", real)
    code, out, _ = sweep(cli, capsys, *args)
    assert code == 0
    assert sorted(path.name for path in SWEEP.iterdir() if path.is_dir()) == ["small", "wide"]
    sessions = yaml.safe_load((SWEEP / stopped / "provenance.yaml").read_text())["sessions"]
    assert [session["status"] for session in sessions] == ["preempted", "finished"]  # resumed, not started over
