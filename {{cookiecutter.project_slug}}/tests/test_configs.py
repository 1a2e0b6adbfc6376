"""This project's configs on this project's task: the starting configs build the default run, and every preset
outside ``configs/example/`` (but the configs of ``search`` and ``sweep``) parses, builds on top of
``configs/default.yaml`` and round-trips (the example's own presets: ``tests/task/``). It names no class of the task,
so a preset that does breaks it once the task is replaced."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml
from runkit.testing.support import needs_extras
from support import CONFIGS, submodule

PRESETS = sorted(
    str(path.relative_to(CONFIGS).with_suffix(""))
    for path in CONFIGS.rglob("*.yaml")
    if path.parent != CONFIGS and path.relative_to(CONFIGS).parts[0] != "example"
)
OTHER_COMMANDS = {"space": "search", "grid": "sweep"}  # a key only the config of another command has
PRESETS = [
    name
    for name in PRESETS
    if not OTHER_COMMANDS.keys() & (yaml.safe_load((CONFIGS / f"{name}.yaml").read_text(encoding="utf-8")) or {}).keys()
]
NEEDS_GPU = {"distributed/fsdp"}  # Lightning's FSDPStrategy needs a CUDA accelerator to be built


@pytest.fixture(scope="module")
def cli() -> ModuleType:
    return submodule("cli")


def build(cli: ModuleType, *names: str) -> object:
    return cli.build_cli([f"--config={CONFIGS / f'{name}.yaml'}" for name in names], run=False)


def test_no_config_builds_the_classes_of_the_starting_configs(cli: ModuleType, in_tmp: Path) -> None:
    built = cli.build_cli([], run=False)
    for key, obj in (("model", built.model), ("data", built.datamodule)):
        starting = yaml.safe_load((CONFIGS / cli.STARTING[key]).read_text())[key]
        class_path = starting if isinstance(starting, str) else starting["class_path"]
        assert f"{type(obj).__module__}.{type(obj).__qualname__}" == class_path, key
    assert not Path("runs").exists()


@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.gpu) if p in NEEDS_GPU else p for p in PRESETS])
def test_preset_builds_on_this_task_and_round_trips(cli: ModuleType, preset: str, in_tmp: Path) -> None:
    needs_extras(preset)
    built = build(cli, preset)  # a class it names that is gone (the example's, once replaced) is refused here
    assert built.model is not None
    assert built.trainer is not None
    # As the saved config.yaml: nulls written out, or re-parsing would bring default.yaml's values back.
    dumped = built.parser.dump(built.config, skip_none=False)
    assert built.parser.dump(built.parser.parse_string(dumped), skip_none=False) == dumped
    # Building the objects writes nothing, but MLflow's local store: its client creates it when built (known gap).
    written = {path.name for path in Path("runs").iterdir()} if Path("runs").exists() else set()
    assert written == ({"mlruns"} if preset == "logger/mlflow" else set())
