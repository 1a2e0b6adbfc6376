"""Your callback: ``callbacks+:`` adds it to what earlier configs hold, a plain ``callbacks:`` replaces those; the
kit's safeguards stay either way (registered in code, not in a config), and a run has each of them once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
import yaml

SAFEGUARDS = {"ExactResume", "Preemption", "StopOnNonFinite", "LastCheckpoint", "BestCheckpoint", "PlateauResume"}


def callbacks_of(cli: ModuleType, *configs: dict[str, object]) -> Counter[str]:
    """The class names of the built Trainer's callbacks when ``configs`` are given in order as ``-c`` files."""
    files = []
    for index, config in enumerate(configs):
        path = Path(f"config-{index}.yaml")
        path.write_text(yaml.safe_dump(config))
        files.append(f"--config={path}")
    built = cli.build_cli(files, run=False)
    return Counter(type(callback).__name__ for callback in built.trainer.callbacks)


EARLY = {"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"monitor": "val/loss"}}
STATS = {"class_path": "lightning.pytorch.callbacks.DeviceStatsMonitor"}


@pytest.mark.usefixtures("in_tmp")
def test_callbacks_plus_adds_a_plain_callbacks_replaces_and_the_safeguards_stay(cli: ModuleType) -> None:
    added = callbacks_of(cli, {"trainer": {"callbacks+": [EARLY]}}, {"trainer": {"callbacks+": [STATS]}})
    replaced = callbacks_of(cli, {"trainer": {"callbacks+": [EARLY]}}, {"trainer": {"callbacks": [STATS]}})
    assert (added["EarlyStopping"], added["DeviceStatsMonitor"]) == (1, 1)
    assert (replaced["EarlyStopping"], replaced["DeviceStatsMonitor"]) == (0, 1)
    for callbacks in (added, replaced, callbacks_of(cli, {"trainer": {"callbacks": []}})):
        assert {name: callbacks[name] for name in SAFEGUARDS} == dict.fromkeys(SAFEGUARDS, 1)
