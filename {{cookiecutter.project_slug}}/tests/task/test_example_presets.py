"""The example's presets (``configs/example/``) on the example, as their headers say: each fits alone for a few steps,
the overfit check drives the loss to ~0, and the search's space names keys of the example's config.

The presets outside ``configs/example/`` fit any task; runkit's suite runs them on code that is not the example's
(its ``tests/test_agnostic_presets.py``), and ``tests/test_configs.py`` builds each of them on this project's task.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from example import SMALL_RUN
from runkit.testing import probes
from support import CONFIGS

NOT_FIT_ALONE = {
    "example/model": "the starting config of `model`: every command without a model class runs it",
    "example/data": "the starting config of `data`: every command without a data class runs it",
    "example/search": "a `search` config: test_search_space_names_keys_of_the_example_s_config",
    "example/sweep": "a `sweep` config: test_the_sweep_s_cells_are_the_example_s_presets_and_seeds",
    "example/image_folder": "needs a folder: test_image_folder.py trains it",
    "example/fsdp": "GPUs only: test_fsdp.py parses it, and trains it on a GPU",
    "example/compile": "compiles for ~25 s cold on a CPU (make test-gpu compiles the example on CUDA)",
}
PRESETS = sorted(str(path.relative_to(CONFIGS).with_suffix("")) for path in (CONFIGS / "example").glob("*.yaml"))
FEW_STEPS = [  # two steps and a validation: what an epoch does, in brief
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
]
SMALL_GRATINGS = [f"--data.init_args.{key}={value}" for key, value in {"train_size": 256, "val_size": 32,
                  "test_size": 32, "batch_size": 16}.items()]  # fmt: skip


def test_the_example_s_presets_are_found() -> None:
    assert {"example/transformer", "example/overfit", "example/groupnorm", "example/search"} <= set(PRESETS)


@pytest.mark.parametrize("preset", [preset for preset in PRESETS if preset not in NOT_FIT_ALONE])
def test_preset_alone_fits(cli: ModuleType, in_tmp: Path, preset: str) -> None:
    fitted = cli.build_cli(["fit", f"--config={CONFIGS / preset}.yaml", *FEW_STEPS, *SMALL_GRATINGS])
    assert fitted.trainer.global_step >= 1
    assert torch.isfinite(torch.as_tensor(float(fitted.trainer.callback_metrics["train/loss_epoch"])))


@pytest.mark.slow  # 50 short epochs
def test_overfit_drives_the_training_loss_to_zero(run_cli: Callable[..., object]) -> None:
    built = run_cli("fit", presets=(*SMALL_RUN, "example/overfit"))
    assert built.trainer.num_training_batches == 2
    epoch_losses = [value for _, value in probes.read_scalars(built.trainer.log_dir)["train/loss_epoch"]]
    assert len(epoch_losses) == 50
    assert epoch_losses[0] > 1.5  # chance level is ln(10) = 2.3
    assert epoch_losses[-1] < 0.02  # ~0.005 on the reference machine


def leaves(tree: object, prefix: str = "") -> set[str]:
    """``{"a.b.c", ...}``: the dotted key of every leaf of a nested mapping."""
    if not isinstance(tree, dict):
        return {prefix}
    return {key for name, child in tree.items() for key in leaves(child, f"{prefix}.{name}" if prefix else name)}


def test_search_space_names_keys_of_the_example_s_config(cli: ModuleType, in_tmp: Path) -> None:
    search = yaml.safe_load((CONFIGS / "example/search.yaml").read_text())
    built = cli.build_cli([], run=False)
    keys = leaves(yaml.safe_load(built.parser.dump(built.config, skip_none=False)))
    assert search["space"]
    assert sorted(set(search["space"]) - keys) == []  # a key the config lacks would be refused by `search`
    assert not Path("runs").exists()


def test_the_sweep_s_cells_are_the_example_s_presets_and_seeds(
    cli: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("optuna", reason="`sweep` needs the project's `search` extra")
    monkeypatch.chdir(CONFIGS.parent)  # its grid names presets as a command in the project's folder does
    with pytest.raises(SystemExit) as done:  # --dry_run: every file and key checked, each cell's command printed
        cli.main(["sweep", "--config=configs/example/sweep.yaml", "--dry_run=true"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err[-2000:]
    cells = [line.split(":")[0] for line in out.splitlines() if " fit --config=configs/example/" in line]
    assert cells == [f"{net},seed_everything={seed}" for net in ("model", "transformer") for seed in (1, 2, 3)]
