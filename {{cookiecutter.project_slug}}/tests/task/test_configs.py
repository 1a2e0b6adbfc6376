"""Every YAML under configs/ parses and instantiates, alone (on top of default.yaml, always loaded) and round-trips."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from runkit.testing.support import needs_extras, refused
from support import CONFIGS

PRESETS = sorted(str(path.relative_to(CONFIGS).with_suffix("")) for path in CONFIGS.rglob("*.yaml"))
PRESETS = [name for name in PRESETS if not name.startswith("search/")]  # `search` configs: test_search_presets.py
# Presets that Lightning cannot instantiate without a GPU (test_fsdp.py parses them on CPU instead).
NEEDS_GPU = {"distributed/fsdp": "FSDPStrategy needs a CUDA accelerator"}
# Presets with a key left for the user to fill (their header says so), and the flags a test fills it with
# (the test's image folder holds 48 training images: smaller batches than the preset's 64).
NEEDS_VALUE = {"data/image_folder": ("--data.init_args.root={image_root}", "--data.init_args.batch_size=8")}


def build(cli: ModuleType, *names: str, extra: tuple[str, ...] = ()) -> object:
    return cli.build_cli([*(f"--config={CONFIGS / f'{name}.yaml'}" for name in names), *extra], run=False)


def test_presets_are_found_in_their_folders() -> None:
    assert {"default", "debug/tiny", "example/transformer", "precision/bf16", "distributed/ddp"} <= set(PRESETS)


def test_a_preset_left_unfilled_names_the_missing_key(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = refused(capsys, lambda: build(cli, "data/image_folder"))
    assert "required: root" in error
    assert "ImageFolderDataModule" in error


def test_no_config_builds_the_default_run(cli: ModuleType, classifier: ModuleType, in_tmp: Path) -> None:
    built, default = cli.build_cli([], run=False), build(cli, "default")
    assert built.parser.dump(built.config) == default.parser.dump(default.config)
    assert isinstance(built.model, classifier.Classifier)


@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.gpu) if p in NEEDS_GPU else p for p in PRESETS])
def test_preset_alone_instantiates_and_round_trips(
    cli: ModuleType, classifier: ModuleType, preset: str, image_root: Path, in_tmp: Path
) -> None:
    needs_extras(preset)
    extra = tuple(flag.format(image_root=image_root) for flag in NEEDS_VALUE.get(preset, ()))
    built = build(cli, preset, extra=extra)
    assert isinstance(built.model, classifier.Classifier)
    assert built.model.hparams["num_classes"] == built.datamodule.num_classes
    # As the saved config.yaml: nulls written out, or re-parsing would bring default.yaml's values back.
    dumped = built.parser.dump(built.config, skip_none=False)
    assert built.parser.dump(built.parser.parse_string(dumped), skip_none=False) == dumped
    # Building the objects writes nothing, but MLflow's local store: its client creates it when built (known gap).
    if preset == "logger/mlflow":
        assert {path.name for path in Path("runs").iterdir()} == {"mlruns"}
    else:
        assert not Path("runs").exists()
