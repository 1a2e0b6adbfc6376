"""What a run prints first and last (``kit/observe/first_screen.py``), and the first screen of ``fit --help``: on the
example, with Python's warnings shown as a user's shell shows them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from runkit.testing.support import launch
from support import PACKAGE, SMALL_RUN, config_flags

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
def first_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    cwd = tmp_path_factory.mktemp("first")
    done = launch(PACKAGE, "fit", *config_flags(*SMALL_RUN), cwd=cwd, env=SHOWN)
    assert done.returncode == 0, done.stdout[-3000:]
    return cwd, done.stdout.splitlines()


def test_the_first_line_names_the_run_folder_and_no_line_is_lightning_about_itself(
    first_fit: tuple[Path, list[str]],
) -> None:
    cwd, lines = first_fit
    (run,) = (cwd / "runs" / "debug").iterdir()
    assert lines[0] == f"Run runs/debug/{run.name}: new, seed 42"
    assert [line for line in lines if any(text in line for text in LIGHTNING_ABOUT_ITSELF)] == []


def test_the_last_lines_sum_the_run_up(first_fit: tuple[Path, list[str]]) -> None:
    cwd, lines = first_fit
    (run,) = (cwd / "runs" / "debug").iterdir()
    folder = f"runs/debug/{run.name}"
    assert re.fullmatch(rf"Run {folder} finished: epoch 2, step 8, \d+\.\d s", lines[-5])
    assert re.fullmatch(rf"  best val/acc 0\.\d+: {folder}/checkpoints/best.ckpt", lines[-4])
    assert lines[-3:] == [
        f"  validate:     {PACKAGE} validate -c {folder}/config.yaml --ckpt_path best",
        f"  continue:     {PACKAGE} fit -c {folder}/config.yaml --ckpt_path last --trainer.max_epochs <more>",
        f"  TensorBoard:  tensorboard --logdir {folder}",
    ]


def test_a_resume_says_so_first_and_warns_of_nothing(first_fit: tuple[Path, list[str]]) -> None:
    cwd, _ = first_fit
    (run,) = (cwd / "runs" / "debug").iterdir()
    config = f"runs/debug/{run.name}/config.yaml"
    done = launch(
        PACKAGE, "fit", f"--config={config}", "--ckpt_path=last", "--trainer.max_epochs=3", cwd=cwd, env=SHOWN
    )
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"Run runs/debug/{run.name}: resumed from runs/debug/{run.name}/checkpoints/last.ckpt, seed 42"
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
