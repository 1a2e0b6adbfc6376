"""``fit --ckpt_path best --run.name X`` where no run is named X: the new run X starts from the newest run's best
(a turn-4 leftover, issue 33 item 19: it looked for ``X/checkpoints/best.ckpt`` and asked whether `fit` had run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from runkit.testing.support import digest, refused

SHORT = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=2"]


def test_fit_from_best_into_a_new_named_run(
    run_cli: Callable[..., object], capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    run_cli("fit", "--run.name=source", *SHORT)
    source = Path("runs/fixture/source")
    before = digest(source)
    run_cli("fit", "--ckpt_path=best", "--run.name=tuned", *SHORT)
    record = yaml.safe_load(Path("runs/fixture/tuned/provenance.yaml").read_text())
    assert record["parent"]["run"] == "fixture/source"
    assert record["parent"]["checkpoint"] == str(source / "checkpoints" / "best.ckpt")
    assert record["sessions"][-1]["status"] == "finished"
    assert digest(source) == before  # the run it came from is left as it was
    # Another subcommand reads a run by that name: one that does not exist is one line naming it.
    line = refused(capsys, lambda: run_cli("validate", "--ckpt_path=best", "--run.name=nowhere"))
    assert line == (
        "error: --ckpt_path best --run.name nowhere: runs/fixture has no run named 'nowhere' (`runs` lists the runs)"
    )
