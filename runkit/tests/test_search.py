"""``search``: trials are normal runs, the best one is a preset that reproduces it, bad spaces are refused up front."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import submodule
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from runkit.testing.support import digest, run_dir_flags

optuna = pytest.importorskip("optuna", reason="the search needs the project's `search` extra (Optuna)")

SEARCH = Path("runs/fixture/search")
SPACE = {
    "model.lr": {"float": [1.0e-3, 1.0e-1], "log": True},  # short for model.init_args.lr
    "model.init_args.hidden": {"int": [8, 48], "step": 8},
    "model.init_args.dropout": {"choice": [0.0, 0.2]},
}


def search(cli: ModuleType, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs ``search *args`` in this process: its exit code, stdout and stderr."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["search", *args])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def write_space(space: dict[str, object], name: str = "space.yaml") -> str:
    Path(name).write_text(yaml.safe_dump({"space": space}))
    return f"--config={name}"


def load_study(name: str = "search", search_dir: Path = SEARCH) -> optuna.Study:
    journal = optuna.storages.journal.JournalFileBackend(str(search_dir / "study.log"))
    storage = optuna.storages.JournalStorage(journal)
    return optuna.load_study(study_name=name, storage=storage)


def session_hparams(run_dir: Path) -> dict[str, object]:
    """The hparams of the run's TensorBoard session (what its hparams view shows)."""
    hparams: dict[str, object] = {}
    for events in sorted(run_dir.glob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        content = accumulator.PluginTagToContent("hparams").get("_hparams_/session_start_info")
        if content is not None:
            info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
            hparams = {key: getattr(value, value.WhichOneof("kind")) for key, value in info.hparams.items()}
    return hparams


def test_trials_are_runs_and_the_best_preset_reproduces_its_metric(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], run_cli: Callable[..., object]
) -> None:
    code, out, err = search(cli, capsys, write_space(SPACE), "--trials=3")
    assert code == 0, err[-3000:]
    study = load_study()
    trials = study.get_trials()
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    for trial in trials:
        run = SEARCH / f"trial-{trial.number:03d}"
        config = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]
        assert {"lr": config["lr"], "hidden": config["hidden"], "dropout": config["dropout"]} == {
            key.split(".")[-1]: value for key, value in trial.params.items()
        }
        assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["global_step"] > 0
        hparams = session_hparams(run)
        assert hparams["model.init_args.lr"] == pytest.approx(trial.params["model.init_args.lr"])
        assert hparams["trial"] == trial.number
        assert f"trial {trial.number} complete: val/loss=" in out
    # The table: best first, then the preset's path.
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [int(row[1]) for row in rows] == [t.number for t in sorted(trials, key=lambda t: t.value)]
    assert f"preset: {SEARCH / 'best.yaml'}" in out

    # `fit` with the preset alone trains the best trial again, to the same metric, bit for bit.
    preset = yaml.safe_load((SEARCH / "best.yaml").read_text())
    assert set(preset) == {"model"}  # only what the trial changed from the default config
    fitted = run_cli("fit", f"--config={SEARCH / 'best.yaml'}", *run_dir_flags("runs/again/best"))
    assert float(fitted.trainer.checkpoint_callback.best_model_score) == study.best_value

    # The same command with a larger budget continues the study: one more trial, none repeated.
    code, out, _ = search(cli, capsys, "--config=space.yaml", "--trials=4")
    assert code == 0
    assert len(load_study().get_trials()) == 4
    assert "trial 3 complete" in out
    assert "trial 0 complete" not in out
    # Another space under the same name is refused rather than mixed into the study.
    code, _, err = search(cli, capsys, write_space({"model.lr": {"float": [0.1, 0.2]}}, "other.yaml"), "--trials=5")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: study 'search'")


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({"model.init_args.lrr": {"float": [0.1, 1.0]}}, "model.init_args.lrr: no such config key; did you mean"),
        ({"model.lr": {"float": [0.1, 0.1]}}, "model.lr: empty range"),
        ({"model.lr": {"float": [0.1, 0.01]}}, "model.lr: low 0.1 > high 0.01"),
        ({"model.lr": {"float": [0.0, 0.1], "log": True}}, "model.lr: a log scale needs low > 0"),
        ({"model.hidden": {"choice": []}}, "model.hidden: empty choice"),
        ({"model.hidden": {"choice": [8, "wide"]}}, "model.hidden: the config refuses 'wide'"),
        ({"model.hidden": {"int": [8.5, 16]}}, "model.hidden: int needs [low, high] of int numbers"),
        ({"model.lr": {"float": [0.1, 1.0], "logg": True}}, "model.lr: unknown option 'logg'"),
        ({"run.name": {"choice": ["a", "b"]}}, "run.name: set by the search itself"),
        (
            {"model.class_path": {"choice": ["fixture_task.SequenceRegressor", "fixture_task.Missing"]}},
            "model.class_path: the config refuses 'fixture_task.Missing'",
        ),
    ],
)
def test_bad_space_is_one_error_line_naming_the_key_and_writes_nothing(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], space: dict[str, object], message: str
) -> None:
    code, _, err = search(cli, capsys, write_space(space))
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"error: space: {message}")
    assert not Path("runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trials=0"], "error: --trials and --workers must be >= 1, got 0 and 1"),
        (["--heartbeat_interval=5", "--grace_period=5"], "error: need 1 <= --heartbeat_interval < --grace_period"),
        (["--metric=val/mse"], "error: --direction: say `minimize` or `maximize` for --metric val/mse"),
        (["--trainer.fast_dev_run=true"], "error: trainer.fast_dev_run: a trial under it logs no metric to rank"),
        # A closed port: the message names the database, without its password.
        (
            ["--storage=postgresql://user:secret@127.0.0.1:1/db"],
            "error: --storage postgresql://user:***@127.0.0.1:1/db: cannot connect",
        ),
    ],
)
def test_bad_settings_are_one_error_line_and_write_nothing(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = search(cli, capsys, write_space(SPACE), *args)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(message)
    assert "secret" not in err
    assert not Path("runs").exists()


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ("sqlit:///study.db", "error: --storage sqlit:///study.db: no database driver for 'sqlit'"),
        ("journals", "error: --storage journals: a folder, not a journal file"),
        ("broken.log", "error: --storage broken.log: not an Optuna journal (line 2:"),
        (None, f"error: {SEARCH / 'study.log'}: not an Optuna journal (line 1:"),  # the search's own journal
    ],
    ids=["scheme", "folder", "corrupt", "corrupt-default"],
)
def test_a_storage_that_cannot_be_used_is_one_line_naming_it(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], storage: str | None, message: str
) -> None:
    Path("journals").mkdir()
    Path("broken.log").write_text('{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}\n{oops\n')
    if storage is None:
        SEARCH.mkdir(parents=True)
        (SEARCH / "study.log").write_text("not json\n")
    space = write_space(SPACE)
    before = sorted(str(path) for path in in_tmp.rglob("*"))
    code, _, err = search(cli, capsys, space, *([f"--storage={storage}"] if storage else []))
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-2000:]
    assert errors[0].startswith(message), errors
    assert sorted(str(path) for path in in_tmp.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("storage", [None, "other.log"], ids=["journal-gone", "other-storage"])
def test_a_new_study_never_adopts_trial_folders_it_did_not_make(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], storage: str | None
) -> None:
    # An earlier study's trial: its last.ckpt would be resumed with the new study's values for trial 0.
    (SEARCH / "trial-000" / "checkpoints").mkdir(parents=True)
    (SEARCH / "trial-000" / "checkpoints" / "last.ckpt").write_bytes(b"an earlier study's trial")
    space = write_space(SPACE)
    before = digest(in_tmp)
    code, _, err = search(cli, capsys, space, "--trials=1", *([f"--storage={storage}"] if storage else []))
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"error: {SEARCH} holds trial folders of another study (trial-000): this study"
        f" ({storage or SEARCH / 'study.log'}) did not make them; give the search another --run.name, or move them"
        " away"
    )
    assert digest(in_tmp) == before


def test_search_refuses_the_folder_of_a_fit_run(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], run_cli: Callable[..., object]
) -> None:
    run = SEARCH.with_name("fitted")
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed_everything: 1\n")  # what makes a folder a run (with provenance.yaml, ...)
    space = write_space(SPACE)
    before = digest(in_tmp)
    code, _, err = search(cli, capsys, space, "--trials=1", "--run.name=fitted")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"error: run.name: {run} is a fit run, not a search's folder: give the search another --run.name"
    )
    assert digest(in_tmp) == before


def test_a_trial_folder_belongs_to_the_study_that_made_it(tmp_path: Path) -> None:
    trial = submodule("search.trial")
    folder = tmp_path / "trial-000"
    trial.claim(folder, "study-a")  # new: made, and marked as study-a's
    trial.claim(folder, "study-a")  # study-a's again (a retry resumes it)
    with pytest.raises(trial.TrialRefusedError, match=f"{folder} was made by another study"):
        trial.claim(folder, "study-b")
    (tmp_path / "trial-001").mkdir()  # no mark: made by something else
    with pytest.raises(trial.TrialRefusedError, match="trial-001 was made by another study"):
        trial.claim(tmp_path / "trial-001", "study-a")


def test_a_study_started_before_trial_folders_were_marked_keeps_its_own(in_tmp: Path) -> None:
    start, worker = submodule("search.start"), submodule("search.worker")
    SEARCH.mkdir(parents=True)
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(SEARCH / "study.log")))
    earlier = optuna.create_study(study_name="search", storage=journal)  # as a version without marks left it
    earlier.tell(earlier.ask(), 1.0)
    (SEARCH / "trial-000").mkdir()
    settings = {"heartbeat_interval": 10, "grace_period": 60, "optuna_config": {"sampler": None, "pruner": None}}
    settings["project"] = submodule("project").Project()
    plan = worker.Plan("search", None, SEARCH, SEARCH / "base.yaml", (), "val/loss", "minimize", 2, **settings)
    _, _, plan = start.start_study(plan, "trainer: {}\n")
    assert plan.study_uid == load_study().user_attrs["uid"]
    submodule("search.trial").claim(SEARCH / "trial-000", plan.study_uid)  # its own: a retry may resume it


def test_a_metric_that_is_never_logged_is_an_error_listing_the_logged_ones(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = search(cli, capsys, write_space(SPACE), "--trials=2", "--metric=val/acc", "--direction=maximize")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "error: the searched metric 'val/acc' is never logged; logged: lr-AdamW, train/grad_norm, train/loss,"
        " train/loss_step, val/loss"
    )
    assert len(load_study().get_trials()) == 1  # it stopped at the first trial's first validation


def test_pruned_trials_stop_after_the_epoch_optuna_prunes_them(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A threshold no trial meets: every trial is pruned at its first report (epoch 0).
    pruner = ["--pruner=optuna.pruners.ThresholdPruner", "--pruner.upper=0.0"]
    code, out, _ = search(cli, capsys, write_space(SPACE), "--trials=2", *pruner, "--trainer.max_epochs=3")
    assert code == 0
    trials = load_study().get_trials()
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.PRUNED] * 2
    for trial in trials:
        assert list(trial.intermediate_values) == [0]
        last = torch.load(SEARCH / f"trial-{trial.number:03d}" / "checkpoints" / "last.ckpt", weights_only=True)
        assert (last["epoch"], last["global_step"]) == (0, 16)  # the first epoch of three, then a clean stop
    assert "no complete trial yet: no best.yaml" in out
    assert not (SEARCH / "best.yaml").exists()
    # Stopping after the last epoch would save nothing: such a trial completes, with its value.
    one = ["--trials=1", "--trainer.max_epochs=1", "--run.name=one-epoch"]
    code, _, _ = search(cli, capsys, "--config=space.yaml", *pruner, *one)
    assert code == 0
    (trial,) = load_study("one-epoch", SEARCH.parent / "one-epoch").get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE


def test_ddp_trials_are_refused_with_one_line_before_any_trains(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Lightning's DDP launcher would start `search` again as process 1: a second search worker (it hung).
    ddp = ["--trainer.devices=2", "--trainer.strategy=ddp"]
    code, _, err = search(cli, capsys, write_space(SPACE), "--trials=2", *ddp)
    assert code == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: trainer: a search trial trains in one process, and this config trains in 2 (1 node(s) x 2 device(s)):"
        " set --trainer.devices 1 --trainer.num_nodes 1, and run trials side by side with --workers N"
    ]
    assert not list(SEARCH.glob("trial-*/checkpoints"))
    states = optuna.trial.TrialState
    # The refused trial is not counted: its values are queued again for a search with a config that works.
    assert [trial.state for trial in load_study().get_trials()] == [states.FAIL, states.WAITING]


def test_a_grid_sampler_runs_its_grid_once_and_ends_the_search(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Optuna's GridSampler ends the study when told its last point (`Study.stop`, meant for `optimize`).
    grid = {"model.init_args.hidden": [8, 16]}
    Path("grid.yaml").write_text(
        yaml.safe_dump(
            {
                "space": {"model.init_args.hidden": {"choice": [8, 16]}},
                "sampler": {"class_path": "optuna.samplers.GridSampler", "init_args": {"search_space": grid}},
            }
        )
    )
    code, _, err = search(cli, capsys, "--config=grid.yaml", "--trials=5", "--trainer.max_epochs=1")
    assert code == 0, err
    trials = load_study().get_trials()
    assert sorted(trial.params["model.init_args.hidden"] for trial in trials) == [8, 16]  # each point once, then done
    assert {trial.state for trial in trials} == {optuna.trial.TrialState.COMPLETE}
    assert (SEARCH / "best.yaml").is_file()


def test_a_search_of_another_model_than_the_project_starts_from_writes_its_best_preset(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A project whose starting config holds its model (as the template's configs/example/model.yaml does), searched
    # over another model class: the preset was diffed against a default parsed without any model (exit 2, no preset).
    project_module, runkit = submodule("project"), __import__("runkit")
    monkeypatch.delenv(project_module.DEFAULT_CONFIG_ENV)
    fixture = yaml.safe_load((Path(__file__).parent / "fixture.yaml").read_text())
    configs = in_tmp / "configs"
    configs.mkdir()
    (configs / "model.yaml").write_text(yaml.safe_dump({"model": fixture.pop("model")}))
    (configs / "default.yaml").write_text(yaml.safe_dump(fixture))
    links = __import__("fixture_cli").LINKS
    project = runkit.Project(program="fixture_cli", configs=configs, links=links, starting={"model": "model.yaml"})
    space = {"model.init_args.lr": {"float": [1.0e-3, 1.0e-1], "log": True}}
    Path("linear.yaml").write_text(
        yaml.safe_dump({"model": {"class_path": "fixture_task.CollectiveRegressor"}, "space": space})
    )
    with pytest.raises(SystemExit) as exit_info:
        runkit.main(["search", "--config=linear.yaml", "--trials=2", "--trainer.max_epochs=1"], project)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err[-3000:]
    preset = yaml.safe_load((SEARCH / "best.yaml").read_text())
    assert preset["model"]["class_path"] == "fixture_task.CollectiveRegressor"
    assert f"preset: {SEARCH / 'best.yaml'}" in out
    # The preset alone, on the project's command line, trains the best trial again to the same metric.
    fitted = runkit.build_cli(["fit", f"--config={SEARCH / 'best.yaml'}", "--run.name=again"], project=project)
    assert type(fitted.model).__name__ == "CollectiveRegressor"
    assert float(fitted.trainer.checkpoint_callback.best_model_score) == load_study().best_value


def test_a_study_started_before_a_key_was_added_is_the_same_config_with_that_key_at_its_default() -> None:
    # A study's base.yaml written before runkit added `last_checkpoint.background` (0.2.0) is joined by the same
    # command now, which holds the key at its default; another value of it is another config.
    start = submodule("search.start")
    before = {"last_checkpoint": {"every_n_train_steps": 5}, "trainer": {"max_epochs": 2}}
    now = {"last_checkpoint": {"every_n_train_steps": 5, "background": True}, "trainer": {"max_epochs": 2}}
    assert start._canonical(now) == start._canonical(before)
    assert start._differences(before, now) == ""
    synchronous = {**now, "last_checkpoint": {"every_n_train_steps": 5, "background": False}}
    assert (
        start._differences(before, synchronous)
        == " (fit keys that differ from its base.yaml: last_checkpoint.background)"
    )
