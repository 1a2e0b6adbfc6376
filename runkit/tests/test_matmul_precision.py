"""The float32 matmul precision: ``high`` (TensorFloat32) for every run on a CUDA machine, configurable, put back."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from support import submodule

from runkit.testing import probes

PRECISION = "runkit.MatmulPrecision"


@pytest.fixture(scope="module")
def matmul_precision() -> ModuleType:
    return submodule("parts.matmul_precision")


def test_set_on_a_cuda_machine_and_put_back(matmul_precision: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_float32_matmul_precision("highest")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    callback = matmul_precision.MatmulPrecision()
    assert torch.get_float32_matmul_precision() == "high"  # when built: Lightning checks it before any hook
    callback.teardown(None, None, "fit")  # type: ignore[arg-type]
    assert torch.get_float32_matmul_precision() == "highest"
    callback.setup(None, None, "fit")  # type: ignore[arg-type]
    assert torch.get_float32_matmul_precision() == "high"


def test_left_alone_without_cuda(matmul_precision: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_float32_matmul_precision("highest")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    matmul_precision.MatmulPrecision("medium").setup(None, None, "fit")  # type: ignore[arg-type]
    assert torch.get_float32_matmul_precision() == "highest"  # CPU runs stay bit-exact


CONFIGURED = [f"--trainer.callbacks+={PRECISION}", "--trainer.callbacks.float32=medium"]


@pytest.mark.parametrize(("flags", "expected"), [([], "high"), (CONFIGURED, "medium")], ids=["default", "configured"])
def test_every_run_gets_one_setting(
    cli: ModuleType, matmul_precision: ModuleType, in_tmp: Path, flags: list[str], expected: str
) -> None:
    built = cli.build_cli(flags, run=False)
    settings = [c.float32 for c in built.trainer.callbacks if isinstance(c, matmul_precision.MatmulPrecision)]
    assert settings == [expected]


@pytest.mark.gpu
def test_gpu_fit_runs_tensorfloat32_without_lightnings_advice(run_cli: Callable[..., object]) -> None:
    torch.set_float32_matmul_precision("highest")
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("lightning.fabric")  # where Lightning advises setting it, as it sets up the device
    logger.addHandler(handler)
    try:
        built = run_cli("fit", "--trainer.accelerator=gpu", "--trainer.devices=1", "--trainer.max_steps=2",
                        "--trainer.callbacks+=runkit.testing.probes.MatmulPrecisionRecorder")  # fmt: skip
    finally:
        logger.removeHandler(handler)
    assert probes.find(built.trainer, probes.MatmulPrecisionRecorder).seen == "high"
    assert not [message for message in messages if "Tensor Cores" in message]
    assert torch.get_float32_matmul_precision() == "highest"  # put back when the run ended
