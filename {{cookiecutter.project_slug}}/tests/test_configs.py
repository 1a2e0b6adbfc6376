"""Every YAML under configs/ parses and instantiates on top of default.yaml, and survives a round trip."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
from conftest import CONFIGS

PRESETS = sorted(path.stem for path in CONFIGS.glob("*.yaml") if path.stem != "default")
# Presets that Lightning cannot instantiate without a GPU (test_fsdp.py parses them on CPU instead).
NEEDS_GPU = {"fsdp": "FSDPStrategy needs a CUDA accelerator"}


def build(cli: ModuleType, *names: str) -> object:
    return cli.build_cli([f"--config={CONFIGS / f'{name}.yaml'}" for name in names], run=False)


def test_presets_are_found() -> None:
    assert "debug" in PRESETS


@pytest.mark.parametrize("stack", [("default",), *[("default", name) for name in PRESETS]], ids="+".join)
def test_config_instantiates_and_round_trips(cli: ModuleType, module: ModuleType, stack: tuple, in_tmp: Path) -> None:
    if stack[-1] in NEEDS_GPU and not torch.cuda.is_available():
        pytest.skip(NEEDS_GPU[stack[-1]])
    built = build(cli, *stack)
    assert isinstance(built.model, module.Classifier)
    assert built.model.hparams["num_classes"] == built.datamodule.num_classes
    dumped = built.parser.dump(built.config)
    assert built.parser.dump(built.parser.parse_string(dumped)) == dumped
    assert not Path("runs").exists()  # building the objects writes nothing
