"""``lr_find`` on the example: the suggestion reaches the optimizer given as a CLI callable (lightning#16787)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from runkit.testing.support import run_dir_flags
from support import SMALL_RUN, config_flags


def test_lr_find_sets_the_lr_of_the_optimizer_callable(
    cli: ModuleType, run_cli: Callable[..., Any], in_tmp: Path, capsys: Any
) -> None:
    run = in_tmp / "runs/debug/lr"
    # 15 steps: the fewest with a suggestion (Lightning skips the first 10 and the last point).
    run_cli("lr_find", "--num_training=15", "--data.init_args.image_size=16", *run_dir_flags(run))
    key = "model.init_args.optimizer.init_args.lr"  # found in the config: the only `lr` under `model`
    value = yaml.safe_load((run / "lr_find.yaml").read_text())["model"]["init_args"]["optimizer"]["init_args"]["lr"]
    assert f"suggested {key}: {value:g} (configured: 0.003)" in capsys.readouterr().out
    # Stacked on the configs it ran with, the preset sets the LR of the optimizer the model builds.
    flags = [
        *config_flags(*SMALL_RUN),
        f"--config={run / 'lr_find.yaml'}",
    ]
    model = cli.build_cli(flags, run=False).model
    assert model.optimizer_factory(model.parameters()).param_groups[0]["lr"] == value
