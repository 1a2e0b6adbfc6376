"""The presets outside ``configs/example/`` fit any task: the kit's fixture task, and Lightning's BoringModel.

A preset that sets arguments of the example's classes lives in ``configs/example/``; ``tests/task/test_presets_run.py``
runs every preset on the example. Here the others run, a few steps each, on code that is not the example's, so a
team that replaces the example keeps them.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from support import CONFIGS, TESTS, submodule

from runkit.testing.support import refused

OWN_TESTS = {"distributed", "logger", "data", "predict", "search", "example"}  # other processes, extras, data, tests
AGNOSTIC = sorted(  # the folders with tests of their own aside
    str(path.relative_to(CONFIGS).with_suffix(""))
    for path in CONFIGS.rglob("*.yaml")
    if path.parent != CONFIGS and path.relative_to(CONFIGS).parts[0] not in OWN_TESTS
)
FEW_STEPS = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
REFUSED = {
    ("training/early_stopping", "BoringModel"): "trainer.callbacks: EarlyStoppingOnBest.setup (early_stopping.py:60):"
    " EarlyStopping: monitor is null and no"
    " checkpoint callback monitors a metric: set it",  # BoringModel logs no validation metric
}
BORING = ["--model=lightning.pytorch.demos.BoringModel", "--data=lightning.pytorch.demos.BoringDataModule"]


def example_keys(preset: str) -> list[str]:
    """The keys of ``preset`` under the model's or the data's arguments (what only the example's classes take)."""
    text = (CONFIGS / f"{preset}.yaml").read_text().replace("{{ cookiecutter.package_name }}", "example")  # unrendered
    config = yaml.safe_load(text) or {}
    return [f"{key}.init_args" for key in ("model", "data") if "init_args" in (config.get(key) or {})]


def test_only_presets_in_configs_example_set_the_examples_arguments() -> None:
    assert {"debug/tiny", "debug/limit_batches", "precision/bf16", "training/accumulate"} <= set(AGNOSTIC)
    assert [name for name in AGNOSTIC if example_keys(name)] == []
    bound = [path.stem for path in (CONFIGS / "example").glob("*.yaml") if example_keys(f"example/{path.stem}")]
    assert {"model", "transformer", "warmup_restarts", "overfit", "small_data"} <= set(bound)


@pytest.mark.parametrize("task", ["fixture", "BoringModel"])
@pytest.mark.parametrize("preset", AGNOSTIC)
def test_agnostic_preset_fits_code_that_is_not_the_example(
    cli: ModuleType,
    in_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    preset: str,
    task: str,
) -> None:
    if task == "BoringModel":  # the Trainer settings of the kit's tests only: no metric of the fixture's named
        monkeypatch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "foreign.yaml"))
    if preset == "precision/fp16" and not torch.cuda.is_available():
        pytest.skip("fp16 runs as bf16 on a CPU, with a warning: precision/bf16 covers it")
    args = ["fit", f"--config={CONFIGS / preset}.yaml", *FEW_STEPS, *(BORING if task != "fixture" else [])]
    if (preset, task) in REFUSED:  # what the preset needs and the code does not give: one line, before anything runs
        assert refused(capsys, lambda: cli.build_cli(args)) == f"error: {REFUSED[preset, task]}"
        return
    fitted = cli.build_cli(args)
    assert fitted.trainer.global_step >= 1
    assert type(fitted.model).__name__ == ("BoringModel" if task == "BoringModel" else "SequenceRegressor")
