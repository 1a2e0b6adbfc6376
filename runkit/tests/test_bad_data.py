"""Bad data found by the task's own checks (``runkit.check_samples`` at setup) stops ``fit`` before training: exit 1,
one ``error:`` line last naming the split and the sample, no checkpoint. Moved here from the generated project's
tests, which re-checked it on the example."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixture_task import SequenceData
from support import PACKAGE

import runkit
from runkit.testing.support import launch


class DataWithANan(SequenceData):
    """The fixture's data, sample 3 of its training split holding a NaN, checked at setup as a task checks its own."""

    def setup(self, stage: str) -> None:
        super().setup(stage)
        inputs = self.datasets["train"].inputs.clone()
        inputs[3, 5] = float("nan")
        runkit.check_samples("train", inputs, torch.zeros(len(inputs), dtype=torch.int64), 1, (self.length,))


@pytest.mark.slow  # a process
def test_bad_data_exits_1_with_one_error_line_and_no_checkpoint(tmp_path: Path) -> None:
    done = launch(PACKAGE, "fit", f"--data={__name__}.DataWithANan", cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert done.stdout.rstrip().splitlines()[-1] == "error: train sample 3: contains NaN or Inf values"
    assert not list(tmp_path.rglob("*.ckpt"))
