"""A sweep in MLflow: the sweep is a parent run and each cell's run its child, as a search's study and trials are;
the parent holds the best cell and the results table."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import servers
from tracker_setup import clear_tracker_environment, needs, tracker_flags

optuna = pytest.importorskip("optuna", reason="the sweep needs the project's `search` extra (Optuna)")


@pytest.mark.faults  # an MLflow server's start and 4 cells: 43 s at load 10
def test_the_sweep_is_a_parent_run_and_each_cell_a_child(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    needs("mlflow")
    clear_tracker_environment(monkeypatch)
    with servers.mlflow_server() as server:
        url = server.url()
        flags = [tracker_flags("mlflow", mlflow={"tracking_uri": url}), "--trainer.max_epochs=1"]
        with pytest.raises(SystemExit) as done:
            cli.main(["sweep", *flags, "--grid=seed_everything=1,2", "--grid=model.init_args.hidden=8,16"])
        out, err = capsys.readouterr()
        assert done.value.code == 0, out + err
        from mlflow import MlflowClient

        client = MlflowClient(url)
        experiment = client.get_experiment_by_name("fixture").experiment_id
        (parent,) = client.search_runs([experiment], filter_string="tags.`kit.search.study` = 'sweep'")
        children = [
            run.info.run_name
            for run in client.search_runs([experiment])
            if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id
        ]
        assert sorted(children) == [
            "seed_everything=1,hidden=16",
            "seed_everything=1,hidden=8",
            "seed_everything=2,hidden=16",
            "seed_everything=2,hidden=8",
        ]
        assert (parent.info.run_name, parent.info.status) == ("sweep sweep", "FINISHED")
        journal = optuna.storages.journal.JournalFileBackend("runs/fixture/sweep/study.log")
        study = optuna.load_study(study_name="sweep", storage=optuna.storages.JournalStorage(journal))
        assert parent.data.metrics["val/loss"] == pytest.approx(study.best_value, rel=1e-6)  # the best cell's
        assert parent.data.tags["kit.search.best_trial"] == str(study.best_trial.number)
        artifacts = {item.path for item in client.list_artifacts(parent.info.run_id)}
        assert {"results.csv", "results.md"} <= artifacts
