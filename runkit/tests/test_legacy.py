"""Names from before the kit was a library (``legacy.py``): ``<package>.kit.X`` imports as ``runkit.X``, also where
the deleted kit left a folder behind; a run's or a study's old class paths compare equal to runkit's names.

The template's tests/test_upgrade.py takes a real project made before the move through its update, end to end.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import submodule

import runkit

legacy = submodule("legacy")
start = submodule("search.start")
worker = submodule("search.worker")

OLD_BASE = """\
model:
  class_path: oldproj.task.Model
  init_args:
    scheduler: {class_path: oldproj.kit.WarmupCosine, init_args: {warmup_fraction: 0.25}}
trainer: {max_epochs: 2, default_root_dir: /elsewhere/runs}
best_checkpoint: {class_path: oldproj.kit.BestCheckpoint, init_args: {monitor: val/acc, mode: max}}
"""


@pytest.fixture
def old_project(tmp_path: Path) -> Iterator[Path]:
    """A package ``oldproj`` whose kit was deleted by git, leaving its ``__pycache__`` folder; imports undone after."""
    (tmp_path / "oldproj" / "kit" / "__pycache__").mkdir(parents=True)
    (tmp_path / "oldproj" / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    finders = list(sys.meta_path)
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.meta_path[:] = finders
        for name in [name for name in sys.modules if name == "oldproj" or name.startswith("oldproj.")]:
            del sys.modules[name]


def test_a_deleted_kit_s_leftover_folder_does_not_hide_runkit(old_project: Path) -> None:
    assert importlib.util.find_spec("oldproj.kit") is not None  # an empty namespace package, without the alias
    legacy.alias_old_kit("oldproj")
    schedules = importlib.import_module("oldproj.kit.parts.schedules")
    assert schedules is sys.modules["runkit.parts.schedules"]
    assert importlib.import_module("oldproj.kit").WarmupCosine is runkit.WarmupCosine
    assert schedules.__spec__.name == "runkit.parts.schedules"  # the alias's import leaves runkit's own spec


def test_a_kit_of_the_project_s_own_is_left_alone(old_project: Path) -> None:
    (old_project / "oldproj" / "kit" / "__init__.py").write_text("OWN = True\n")
    legacy.alias_old_kit("oldproj")
    assert importlib.import_module("oldproj.kit").OWN
    assert legacy.current_names("oldproj.kit.WarmupCosine") == "oldproj.kit.WarmupCosine"


def test_old_class_paths_read_as_runkit_s_names_for_aliased_programs_only(old_project: Path) -> None:
    legacy.alias_old_kit("oldproj")
    saved = {"a": ["oldproj.kit.WarmupCosine", "oldproj.kitchen.X", 3], "b": ("oldproj.kit.parts.schedules.X",)}
    assert legacy.current_names(saved) == {
        "a": ["runkit.WarmupCosine", "oldproj.kitchen.X", 3],
        "b": ("runkit.parts.schedules.X",),
    }
    assert legacy.current_names("other.kit.WarmupCosine") == "other.kit.WarmupCosine"


def plan(folder: Path) -> object:
    return worker.Plan(
        study_name="search",
        storage=None,
        search_dir=folder,
        base_config=folder / "base.yaml",
        space=(),
        metric="val/acc",
        direction="maximize",
        trials=1,
        heartbeat_interval=1,
        grace_period=2,
        optuna_config={"sampler": None, "pruner": None},
        project=runkit.Project(program="oldproj"),
    )


def test_a_study_started_before_the_move_is_joined_with_runkit_s_names(old_project: Path, tmp_path: Path) -> None:
    legacy.alias_old_kit("oldproj")
    search = plan(tmp_path / "search")
    study, _, _ = start.start_study(search, OLD_BASE)  # the study as the kit inside the project started it
    search.base_config.write_text(OLD_BASE)
    before = study.user_attrs["fingerprint"]
    # Now: runkit's names, best_checkpoint's mode left to the metric's name (the template's starting config).
    new = OLD_BASE.replace("oldproj.kit.", "runkit.").replace("mode: max", "mode: null")
    study, _, _ = start.start_study(search, new)
    assert study.user_attrs["fingerprint"] not in (None, before)  # the new spelling's, from now on
    search.base_config.write_text(new)
    start.start_study(search, new)
    with pytest.raises(ValueError, match=r"another space, metric or fit config \(fit keys that differ from its"
                       r" base.yaml: trainer\.max_epochs\); give"):  # fmt: skip
        start.start_study(search, new.replace("max_epochs: 2", "max_epochs: 3"))
