"""Replacing the example takes three places: the team's code, its configs and ``cli.py``'s ``STARTING``.

A project is baked, its example deleted (``task/``, ``tests/task/``, ``configs/example/``) and a task the tests have
never seen put in its place: a GRU that counts the ones in bit strings, with a datamodule of its own, plain Lightning
(nothing of runkit's). Then ``fit`` trains that task, no preset left names the example, and the project's suite passes
untouched: its smoke test through the installed runkit (its console script trains, stops, resumes, validates) and
its configs' test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import assert_tests_pass, bake, edit, install

# Not the default answers (a package of its own: other tests install the default bake meanwhile), so this is also the
# non-default bake whose suite runs: a non-ASCII name, another license and Python reach a working package.
ANSWERS = {"project_name": "Über Vision 2", "license": "BSD-3-Clause", "python_version": "3.11"}
PACKAGE = "uber_vision_2"
TASK = '''"""Counting the ones in bit strings: a GRU regresses the count, on sequences generated from a seed."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


class BitStrings(pl.LightningDataModule):
    def __init__(self, length: int = 12, samples: int = 512, batch_size: int = 32) -> None:
        """Bit strings and their counts of ones.

        Args:
            length: Bits per string.
            samples: Training strings; a quarter as many validate.
            batch_size: Strings per batch.
        """
        super().__init__()
        self.length, self.samples, self.batch_size = length, samples, batch_size

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        bits = torch.randint(0, 2, (self.samples * 5 // 4, self.length), generator=generator).float()
        counts = bits.sum(dim=1, keepdim=True)
        self.train_set = TensorDataset(bits[: self.samples], counts[: self.samples])
        self.val_set = TensorDataset(bits[self.samples :], counts[self.samples :])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, self.batch_size)


class BitCounter(pl.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.01) -> None:
        """A GRU over the bits, its last state read out as the count.

        Args:
            hidden: GRU width.
            lr: Adam's learning rate.
        """
        super().__init__()
        self.save_hyperparameters()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, bits: Tensor) -> Tensor:
        states, _ = self.gru(bits.unsqueeze(-1))  # (B, L, hidden)
        return self.head(states[:, -1])  # (B, 1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = F.mse_loss(self(batch[0]), batch[1])
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.log("val/mse", F.mse_loss(self(batch[0]), batch[1]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
'''
CONFIGS = {
    "configs/counting/model.yaml": f"model:\n  class_path: {PACKAGE}.counting.BitCounter\n"
    "best_checkpoint:\n  monitor: val/mse\n",
    "configs/counting/data.yaml": f"data: {PACKAGE}.counting.BitStrings\n",
}
EXAMPLE = ("src/{package}/task", "tests/task", "configs/example")


def replace_the_example(project: Path) -> None:
    """What a team does: delete the example, add its code and configs, point ``STARTING`` at them."""
    for folder in EXAMPLE:
        shutil.rmtree(project / folder.format(package=PACKAGE))
    (project / "src" / PACKAGE / "counting.py").write_text(TASK, encoding="utf-8")
    for name, text in CONFIGS.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")
    edit(
        project / "src" / PACKAGE / "cli.py",
        'STARTING = {"model": "example/model.yaml", "data": "example/data.yaml"}',
        'STARTING = {"model": "counting/model.yaml", "data": "counting/data.yaml"}',
    )


def values(tree: object) -> list[str]:
    """Every string in a parsed YAML document, keys included: what a config names (comments are not in it)."""
    if isinstance(tree, dict):
        return [text for key, value in tree.items() for text in (*values(key), *values(value))]
    if isinstance(tree, list):
        return [text for item in tree for text in values(item)]
    return [tree] if isinstance(tree, str) else []


@pytest.mark.slow
def test_a_task_of_its_own_replaces_the_example_in_three_places(tmp_path: Path) -> None:
    project = bake(tmp_path, **ANSWERS)
    replace_the_example(project)
    named = {
        str(path.relative_to(project)): text
        for path in sorted((project / "configs").rglob("*.yaml"))
        for text in values(yaml.safe_load(path.read_text(encoding="utf-8")))
        if f"{PACKAGE}.task" in text or "example/" in text
    }
    assert named == {}  # no preset left names the example's classes or its configs
    with install(project):
        # The team's task trains: the console script, on its starting configs, with nothing of the example left.
        script = Path(sys.executable).parent / PACKAGE
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        fit = [str(script), "fit", "-c", "configs/debug/tiny.yaml", "--trainer.enable_progress_bar=false"]
        fitted = subprocess.run(fit, cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert fitted.returncode == 0, fitted.stdout[-3000:] + fitted.stderr[-3000:]
        (config,) = (project / "runs" / "debug").glob("*/config.yaml")
        saved = yaml.safe_load(config.read_text(encoding="utf-8"))
        assert saved["model"]["class_path"] == f"{PACKAGE}.counting.BitCounter"
        assert saved["data"]["class_path"] == f"{PACKAGE}.counting.BitStrings"
        assert (config.parent / "checkpoints" / "best.ckpt").is_file()  # ranked by the task's val/mse
        shutil.rmtree(project / "runs")
        # The project's suite, as its `make test` runs it, without an edit: the smoke test and the configs' test.
        assert_tests_pass(project, "--numprocesses", "2")
