"""What a run prints first and last (``observe/first_screen.py``), and the first screen of ``fit --help``, with
Python's warnings shown as a user's shell shows them. Moved here from the generated project's tests, which re-checked
it on the example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import PACKAGE

from runkit.testing.support import launch

SHOWN = {"PYTHONWARNINGS": ""}  # as a shell starts it: launch() hides warnings from the runs of other tests
LIGHTNING_ABOUT_ITSELF = (
    "Tip:",
    "Trainer already configured",
    "to estimate number of stepping batches",
    "TPU available",
    "Seed set to",
    "exists and is not empty",
    "Warning",
    "deprecated",
)


@pytest.fixture(scope="module")
def first_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """A finished fit of the fixture task: its working directory, its run folder (relative) and what it printed."""
    cwd = tmp_path_factory.mktemp("first")
    done = launch(PACKAGE, "fit", "--model.init_args.schedule=step", cwd=cwd, env=SHOWN)  # one that can go on
    assert done.returncode == 0, done.stdout[-3000:]
    (run,) = (cwd / "runs" / "fixture").iterdir()
    return cwd, f"runs/fixture/{run.name}", done.stdout.splitlines()


def test_the_first_line_names_the_run_folder_and_no_line_is_lightning_about_itself(
    first_fit: tuple[Path, str, list[str]],
) -> None:
    _, folder, lines = first_fit
    assert lines[0] == f"Run {folder}: new, seed 42"
    assert [line for line in lines if any(text in line for text in LIGHTNING_ABOUT_ITSELF)] == []


def test_the_last_lines_sum_the_run_up(first_fit: tuple[Path, str, list[str]]) -> None:
    _, folder, lines = first_fit
    assert re.fullmatch(rf"Run {folder} finished: epoch 2, step \d+, \d+\.\d s", lines[-5]), lines[-5]
    assert re.fullmatch(rf"  best val/loss \d+\.\d+: {folder}/checkpoints/best.ckpt", lines[-4]), lines[-4]
    assert lines[-3:] == [
        f"  validate:     {PACKAGE} validate -c {folder}/config.yaml --ckpt_path best",
        f"  continue:     {PACKAGE} fit -c {folder}/config.yaml --ckpt_path last --trainer.max_epochs <more>",
        f"  TensorBoard:  tensorboard --logdir {folder}",
    ]


def test_a_resume_says_so_first_and_warns_of_nothing(first_fit: tuple[Path, str, list[str]]) -> None:
    cwd, folder, _ = first_fit
    config = f"{folder}/config.yaml"
    done = launch(
        PACKAGE, "fit", f"--config={config}", "--ckpt_path=last", "--trainer.max_epochs=3", cwd=cwd, env=SHOWN
    )
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"Run {folder}: resumed from {folder}/checkpoints/last.ckpt, seed 42"
    assert [line for line in lines if any(text in line for text in LIGHTNING_ABOUT_ITSELF)] == []


def test_fit_help_starts_with_one_usage_line_and_the_most_used_settings(tmp_path: Path) -> None:
    done = launch(PACKAGE, "fit", "--help", cwd=tmp_path, env={"COLUMNS": "100"})
    lines = done.stdout.splitlines()
    assert lines[0] == f"usage: {PACKAGE} fit [-c CONFIG]... [--KEY VALUE]..."
    first_screen = "\n".join(lines[:24])
    for setting in ("--trainer.max_epochs", "--trainer.devices", "--ckpt_path last", "--run.name", "-c configs/"):
        assert setting in first_screen
    titles = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert not [title for title in titles if "<class" in title or "EXTRA_SUBCOMMANDS" in title], titles
    assert {"model", "data", "trainer", "run", "best_checkpoint"} <= {title.split(":")[0] for title in titles}
