"""The search presets (``configs/search/``) fit the example task: every key and range is accepted by its config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import CONFIGS, runkit_module, submodule

pytest.importorskip("optuna", reason="the search needs the project's `search` extra (Optuna)")
SEARCH_PRESETS = sorted(CONFIGS.glob("search/*.yaml"))


@pytest.mark.parametrize("preset", SEARCH_PRESETS, ids=lambda path: path.stem)
def test_search_preset_checks_against_the_default_run(preset: Path, in_tmp: Path) -> None:
    command = runkit_module("search.command")
    project = submodule("cli").PROJECT
    args = [f"--config={preset}"]
    built = runkit_module("command.cli").build_cli(args, run=False, cli_class=command.SearchCLI, project=project)
    plan = command.make_plan(built.parser, built.config, project)  # checks every key and range, writes nothing
    assert plan.space
    assert all(dimension.key.startswith(("model.", "data.", "trainer.")) for dimension in plan.space)
    assert (plan.metric, plan.direction) == ("val/acc", "maximize")  # the default run's best_checkpoint
    assert not Path("runs").exists()


def test_a_choice_of_network_classes_sets_each_trial_s_class(in_tmp: Path) -> None:
    command = runkit_module("search.command")
    networks = [f"{submodule('task.networks').__name__}.{name}" for name in ("ConvNet", "TransformerClassifier")]
    project = submodule("cli").PROJECT
    args = ["--space", json.dumps({"model.network": {"choice": networks}})]
    built = runkit_module("command.cli").build_cli(args, run=False, cli_class=command.SearchCLI, project=project)
    (dimension,) = command.make_plan(built.parser, built.config, project).space
    assert dimension.key == "model.init_args.network"  # `init_args` filled in, the class named by its node
    for network in networks:
        trial = built.parser.parse_args([dimension.flag(network)], namespace=built.config.clone())
        assert trial.model.init_args.network.class_path == network
