"""Experiment trackers (TensorBoard, CSV, MLflow, W&B offline), alone or stacked: the run stays whole, each tracker
holds the same metrics read back with its own reader, a resume continues the same tracked run with every step
once, and no credential lands in a file. MLflow runs against a real tracking server these tests start."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import servers
import tracker_readers as read
import yaml
from faults import fault
from support import CONFIGS, refused, submodule

checks = submodule("kit.trackers.checks")
placement = submodule("kit.trackers.placement")
EXPERIMENT = Path("runs/fixture")
LIMITS = ["--trainer.limit_train_batches=4", "--trainer.limit_val_batches=1"]  # 4 steps an epoch, 2 epochs
NEEDS = {
    "mlflow": ("mlflow", "the MLflow tests need the project's `mlflow` extra"),
    "wandb": ("wandb", "the W&B tests need the project's `wandb` extra"),
}


def needs(*names: str) -> None:
    """Skips, with the reason, when a tracker's extra is not installed."""
    for name in names:
        if name in NEEDS:
            pytest.importorskip(NEEDS[name][0], reason=NEEDS[name][1])


@pytest.fixture(scope="module")
def mlflow_url() -> Iterator[str]:
    """One MLflow tracking server (SQLite store, local artifact root) for the module's tests."""
    pytest.importorskip("mlflow", reason=NEEDS["mlflow"][1])
    with servers.mlflow_server() as (url, _):
        yield url


@pytest.fixture(autouse=True)
def _no_tracker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the machine's environment says about trackers, these tests say it themselves."""
    for name in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_TRACKING_TOKEN",
        "WANDB_API_KEY",
        "WANDB_MODE",
        placement.PARENT_RUN_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):  # the kit moves a URL's credentials here
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("WANDB_SILENT", "true")


def tracker_flags(*names: str, file: str = "trackers.yaml", **init_args: dict[str, Any]) -> str:
    """A config stacking the presets ``configs/logger/<name>.yaml``, with ``init_args`` overrides per name."""
    entries = []
    for name in names:
        (entry,) = yaml.safe_load((CONFIGS / "logger" / f"{name}.yaml").read_text())["trainer"]["logger+"]
        entry["init_args"].update(init_args.get(name, {}))
        entries.append(entry)
    Path(file).write_text(yaml.safe_dump({"trainer": {"logger": entries}}))
    return f"--config={file}"


def the_run() -> Path:
    (run,) = [path for path in EXPERIMENT.iterdir() if path.is_dir()]
    return run


def record(run: Path) -> dict[str, Any]:
    return yaml.safe_load((run / "provenance.yaml").read_text())


def held(name: str, run: Path, mlflow_uri: str | None = None) -> read.Points:
    """What tracker ``name`` holds for ``run``, read back with its own reader."""
    if name == "tensorboard":
        return read.tensorboard(run)
    if name == "csv":
        return read.csv_file(run)
    if name == "wandb":
        return read.wandb_offline(run)
    ids = record(run)["trackers"]["mlflow"]
    return read.mlflow(mlflow_uri or ids["tracking_uri"], ids["run_id"])


@pytest.mark.parametrize("name", ["tensorboard", "csv", "mlflow", "wandb"])
def test_each_tracker_alone_keeps_the_run_whole(
    cli: ModuleType, run_cli: Callable[..., Any], capsys: pytest.CaptureFixture[str], name: str
) -> None:
    needs(name)
    run_cli("fit", *LIMITS, tracker_flags(name))  # MLflow without a server: the local store runs/mlruns
    run = the_run()
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    assert (run / "config.yaml").is_file()
    assert record(run)["sessions"][-1]["status"] == "finished"
    outside = {path.name for path in Path().iterdir()} - {"runs", "trackers.yaml"}
    assert outside == set()  # no lightning_logs/, mlruns/ or wandb/ beside the runs
    assert {path.name for path in Path("runs").iterdir()} == {"fixture", "mlruns"} - (
        {"mlruns"} if name != "mlflow" else set()
    )
    points = held(name, run)
    assert read.steps(points, "train/loss_step") == list(range(8))
    assert read.steps(points, "val/loss") == [3, 7]
    assert record(run)["progress"]["logged_step"] == 7
    # `runs` and `--ckpt_path best` find the run whatever it logs to.
    capsys.readouterr()
    cli.main(["runs"])
    assert f" {run.name} " in capsys.readouterr().out
    validated = run_cli("validate", "--ckpt_path=best", "--verbose=false")
    assert validated.trainer.default_root_dir == str(run)


def test_stacked_trackers_hold_the_same_metrics(
    run_process: Callable[..., subprocess.CompletedProcess[str]], mlflow_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs("mlflow", "wandb")
    names = ("tensorboard", "csv", "mlflow", "wandb")
    # A process of its own, as a W&B run has (in a process that ran W&B before, W&B 0.31 drops some of its rows).
    monkeypatch.delenv("WANDB_SERVICE", raising=False)
    fitted = run_process("fit", *LIMITS, tracker_flags(*names, mlflow={"tracking_uri": mlflow_url}))
    assert fitted.returncode == 0, fitted.stdout[-3000:]
    run = the_run()
    reference = held("tensorboard", run)  # float32 in events files: compared to 1e-6
    assert {"train/loss_step", "val/loss", "lr-AdamW"} <= set(reference)
    for name in names[1:]:
        points = held(name, run, mlflow_url)
        for key, expected in reference.items():
            assert read.steps(points, key) == read.steps(reference, key), (name, key)
            assert [value for _, value in points[key]] == pytest.approx([v for _, v in expected], rel=1e-6), (name, key)


@pytest.mark.slow  # a process to kill
def test_a_killed_run_resumes_the_same_tracked_runs_with_every_step_once(
    cli: ModuleType,
    run_process: Callable[..., subprocess.CompletedProcess[str]],
    mlflow_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    needs("mlflow", "wandb")
    names = ("tensorboard", "csv", "mlflow", "wandb")
    flags = tracker_flags(*names, file=str(Path.cwd() / "trackers.yaml"), mlflow={"tracking_uri": mlflow_url})
    monkeypatch.delenv("WANDB_SERVICE", raising=False)  # W&B's service of this process: the child starts its own
    killed = run_process("fit", flags, fault("SignalAtStep", step=20))  # SIGKILL in epoch 1; last.ckpt: epoch 0
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:]
    run = the_run()
    ids = record(run)["trackers"]
    resumed = run_process("fit", flags, "--ckpt_path=last")
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert the_run() == run
    assert record(run)["trackers"]["mlflow"]["run_id"] == ids["mlflow"]["run_id"]
    assert record(run)["trackers"]["wandb"]["id"] == ids["wandb"]["id"]
    sessions = sorted(run.glob("wandb/offline-run-*"))
    assert len(sessions) == 2
    assert all(path.name.endswith(f"-{ids['wandb']['id']}") for path in sessions)
    reference = held("tensorboard", run)
    for name in names:
        points = held(name, run, mlflow_url)
        assert read.steps(points, "train/loss_step") == list(range(32)), name  # steps 16-20 once, none missing
        assert read.steps(points, "val/loss") == [15, 31], name
        assert [v for _, v in points["train/loss_step"]] == pytest.approx([v for _, v in reference["train/loss_step"]])
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_url)
    mlflow_run = client.get_run(ids["mlflow"]["run_id"])
    assert (mlflow_run.info.status, mlflow_run.data.tags["kit.status"]) == ("FINISHED", "finished")
    # One MLflow run for the run folder (other tests of this module share the server and the experiment).
    named = client.search_runs([mlflow_run.info.experiment_id], filter_string=f"tags.mlflow.runName = '{run.name}'")
    assert [found.info.run_id for found in named] == [ids["mlflow"]["run_id"]]


def test_mlflow_status_follows_each_session_preempted_then_finished(
    run_cli: Callable[..., Any], mlflow_url: str
) -> None:
    needs("mlflow")
    flags = [*LIMITS, tracker_flags("mlflow", mlflow={"tracking_uri": mlflow_url})]
    with pytest.raises(SystemExit) as stopped:
        run_cli("fit", *flags, fault("SignalAtStep", step=2, signum=int(signal.SIGTERM)))
    assert stopped.value.code == 143
    from mlflow import MlflowClient

    client, run_id = MlflowClient(mlflow_url), record(the_run())["trackers"]["mlflow"]["run_id"]
    preempted = client.get_run(run_id)
    assert (preempted.info.status, preempted.data.tags["kit.status"]) == ("KILLED", "preempted")
    run_cli("fit", *flags, "--ckpt_path=last")
    finished = client.get_run(run_id)
    assert (finished.info.status, finished.data.tags["kit.status"]) == ("FINISHED", "finished")
    assert read.steps(read.mlflow(mlflow_url, run_id), "train/loss_step") == list(range(8))


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The module's server (SQLite store) or one with a PostgreSQL store (where PostgreSQL is on the machine)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("mlflow_url")
        return
    pytest.importorskip("mlflow", reason=NEEDS["mlflow"][1])
    with (
        servers.postgres() as database,
        servers.mlflow_server(database.replace("postgresql:", "postgresql+psycopg:")) as (
            url,
            _,
        ),
    ):
        yield url


def test_the_mlflow_run_holds_config_git_artifacts_and_best_checkpoint(
    run_cli: Callable[..., Any], any_store_url: str, tmp_path: Path
) -> None:
    needs("mlflow")
    run_cli("fit", *LIMITS, tracker_flags("mlflow", mlflow={"tracking_uri": any_store_url, "log_model": True}))
    run = the_run()
    from mlflow import MlflowClient

    client, run_id = MlflowClient(any_store_url), record(run)["trackers"]["mlflow"]["run_id"]
    mlflow_run = client.get_run(run_id)
    config = placement.flat(yaml.safe_load((run / "config.yaml").read_text()))
    assert {key: mlflow_run.data.params.get(key) for key in config} == {k: str(v)[:250] for k, v in config.items()}
    git = record(run)["sessions"][0]["git"]
    if git is not None:
        assert mlflow_run.data.tags["mlflow.source.git.commit"] == git["commit"]
        assert mlflow_run.data.tags["kit.git.dirty"] == str(git["dirty"]).lower()
    assert (mlflow_run.info.run_name, mlflow_run.info.status) == (run.name, "FINISHED")
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "fixture"  # run.experiment
    for name in ("config.yaml", "provenance.yaml"):
        copy = Path(client.download_artifacts(run_id, name, str(tmp_path)))
        assert copy.read_text() == (run / name).read_text()
    assert "best.ckpt" in [Path(a.path).name for a in client.list_artifacts(run_id, "best")]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "error: trainer.logger: MLFlowLogger needs the `mlflow` extra: pip install -e '.[mlflow]'"),
        ("scheme", "error: trainer.logger.init_args.tracking_uri: 'htp://127.0.0.1:5000' is no MLflow tracking URI"),
        ("unreachable", "error: trainer.logger.init_args.tracking_uri: cannot reach MLflow at http://127.0.0.1:"),
        ("artifacts", "error: trainer.logger.init_args.artifact_location: cannot create a-file/artifacts: a-file is"),
        ("clash", "error: trainer.logger.init_args.id: 'abcd1234' is the wandb run of runs/fixture/other; resume"),
    ],
)
def test_a_tracker_that_cannot_work_is_one_error_line_and_writes_nothing(
    run_cli: Callable[..., Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str,
    expected: str,
) -> None:  # fmt: skip
    needs("wandb" if case == "clash" else "mlflow")  # the clash is W&B's; any other case is MLflow's
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # an unreachable server fails at once
    Path("a-file").write_text("")
    init_args = {
        "missing": {},
        "scheme": {"tracking_uri": "htp://127.0.0.1:5000"},
        "unreachable": {"tracking_uri": f"http://127.0.0.1:{servers.free_port()}"},
        "artifacts": {"artifact_location": "a-file/artifacts"},
        "clash": {"id": "abcd1234"},
    }[case]
    name = "wandb" if case == "clash" else "mlflow"
    flags = tracker_flags(name, **{name: init_args})
    if case == "missing":
        monkeypatch.setattr(checks, "installed", lambda module: module != "mlflow")
    if case == "clash":  # another run of the experiment logs to that W&B id
        other = EXPERIMENT / "other"
        other.mkdir(parents=True)
        (other / "provenance.yaml").write_text(yaml.safe_dump({"trackers": {"wandb": {"id": "abcd1234"}}}))
    before = sorted(Path().rglob("*"))
    assert refused(capsys, lambda: run_cli("fit", *LIMITS, flags)).startswith(expected)
    assert sorted(Path().rglob("*")) == before


def test_a_server_that_goes_away_mid_run_does_not_stop_training(
    run_cli: Callable[..., Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    needs("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail at once: the test need not wait for retries
    with servers.mlflow_server() as (url, server):
        kill = fault("SignalAtStep", step=3, pid=-server.pid)  # the server's whole process group
        fitted = run_cli("fit", *LIMITS, tracker_flags("mlflow", mlflow={"tracking_uri": url}), kill)
    assert fitted.trainer.global_step == 8  # trained to the end
    run = the_run()
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    lost = record(run)["trackers"]["mlflow"]["lost"]
    assert lost.startswith(f"MLflow at {url} failed after step ")
    err = capsys.readouterr().err
    assert err.count("warning: MLflow at ") == 1
    assert f"warning: {lost}; training goes on without it" in err
    assert record(run)["sessions"][-1]["status"] == "finished"


def search_space() -> str:
    Path("space.yaml").write_text(yaml.safe_dump({"space": {"model.lr": {"float": [1.0e-3, 1.0e-1], "log": True}}}))
    return "--config=space.yaml"


def test_search_trials_are_child_runs_of_one_study_run_showing_the_best(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], mlflow_url: str
) -> None:
    needs("mlflow")
    pytest.importorskip("optuna", reason="the search needs the project's `search` extra (Optuna)")
    flags = [search_space(), tracker_flags("mlflow", mlflow={"tracking_uri": mlflow_url}), "--trials=3", *LIMITS]
    with pytest.raises(SystemExit) as done:
        cli.main(["search", *flags])
    out, err = capsys.readouterr()
    assert done.value.code == 0, out + err
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name("fixture").experiment_id
    (parent,) = client.search_runs([experiment], filter_string="tags.`kit.search.study` = 'search'")
    every = client.search_runs([experiment])
    children = [run for run in every if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(child.info.run_name for child in children) == ["trial-000", "trial-001", "trial-002"]
    best_file = EXPERIMENT / "search" / "best.yaml"
    header = best_file.read_text().splitlines()[0]  # "# Best of search ...: trial N, val/loss = V (minimize)."
    number, value = header.split(": trial ")[1].split(", val/loss = ")
    value = value.split(" ")[0]
    rank_one = next(line.split() for line in out.splitlines() if line.startswith("1 "))
    assert rank_one[1] == number  # the table's best is best.yaml's
    assert parent.data.tags["kit.search.best_trial"] == number
    assert parent.data.metrics["val/loss"] == pytest.approx(float(value), rel=1e-5)
    lr = yaml.safe_load(best_file.read_text())["model"]["init_args"]["lr"]
    assert float(parent.data.params["model.init_args.lr"]) == pytest.approx(lr)  # as the trials name it
    assert parent.info.status == "FINISHED"
    assert {placement.PARENT_RUN_ENV, placement.PARENT_EXPERIMENT_ENV}.isdisjoint(os.environ)


def test_no_credential_lands_in_a_file_the_run_or_the_search_writes(
    cli: ModuleType,
    run_cli: Callable[..., Any],
    capsys: pytest.CaptureFixture[str],
    mlflow_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    needs("mlflow", "wandb")
    pytest.importorskip("optuna", reason="the search needs the project's `search` extra (Optuna)")
    secrets = {
        "MLFLOW_TRACKING_TOKEN": "tok-S3CRET-a1",
        "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01S3CRET",
        "tracking URL password": "pw-S3CRET-b2",
        "storage URL password": "pw-S3CRET-c3",
    }
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", secrets["MLFLOW_TRACKING_TOKEN"])
    monkeypatch.setenv("WANDB_API_KEY", secrets["WANDB_API_KEY"])
    with_password = mlflow_url.replace("http://", f"http://alice:{secrets['tracking URL password']}@")
    names = ("tensorboard", "csv", "mlflow", "wandb")
    run_cli("fit", *LIMITS, tracker_flags(*names, mlflow={"tracking_uri": with_password}))
    assert (
        yaml.safe_load((the_run() / "config.yaml").read_text())["trainer"]["logger"][2]["init_args"]["tracking_uri"]
        == mlflow_url
    )
    with servers.postgres() as database:  # trust authentication: any password is accepted
        storage = database.replace("postgres@", f"postgres:{secrets['storage URL password']}@")
        search = [search_space(), tracker_flags("mlflow", file="search.yaml", mlflow={"tracking_uri": with_password})]
        with pytest.raises(SystemExit) as done:
            cli.main(["search", *search, f"--storage={storage}", "--trials=2", *LIMITS])
        assert done.value.code == 0
    out, err = capsys.readouterr()
    written = [path for path in Path("runs").rglob("*") if path.is_file()]
    assert len(written) > 20
    for name, secret in secrets.items():
        assert secret not in out + err, name
        holding = [str(path) for path in written if secret.encode() in path.read_bytes()]
        assert holding == [], name
