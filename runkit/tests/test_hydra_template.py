"""The migration guide from lightning-hydra-template (``docs/migrate-from-hydra-template.md``), followed on a module of
the template's MNIST interface (``hydra_template.py``): as written it is one line naming the optimizer; with the
guide's two edits, made here from the guide's own lines, it trains, stops on a SIGTERM to its process group with 2
loader workers, and resumes bit-exactly (issue 33, item 17)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from support import PACKAGE, ROOT, TESTS, submodule

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, fit_exit_code, last_checkpoint, launch, refused, run_dir_flags

GUIDE = ROOT / "docs" / "migrate-from-hydra-template.md"
# The guide's edits, as (lines before, lines after): each pair is in the guide's diff blocks, and is what changes.
EDITS = [
    (
        "from lightning import LightningDataModule, LightningModule\n",
        "from lightning import LightningDataModule, LightningModule\n"
        "from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable\n",
    ),
    (
        "        optimizer: torch.optim.Optimizer,\n        scheduler: torch.optim.lr_scheduler,\n",
        "        optimizer: OptimizerCallable,\n        scheduler: LRSchedulerCallable | None = None,\n",
    ),
    (
        "        self.net = net\n",
        "        self.net = net\n        self.optimizer, self.scheduler = optimizer, scheduler\n",
    ),
    (
        "        optimizer = self.hparams.optimizer(params=self.parameters())\n"
        "        if self.hparams.scheduler is not None:\n"
        "            scheduler = self.hparams.scheduler(optimizer=optimizer)\n",
        "        optimizer = self.optimizer(params=self.parameters())\n"
        "        if self.scheduler is not None:\n"
        "            scheduler = self.scheduler(optimizer=optimizer)\n",
    ),
]


def config(module: str) -> dict[str, object]:
    """The guide's config of the module: Hydra's partials as class_path and init_args."""
    return {
        "model": {
            "class_path": f"{module}.MNISTLitModule",
            "init_args": {
                "net": {"class_path": f"{module}.DenseNet", "init_args": {"lin1_size": 32, "lin2_size": 32}},
                "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.002, "weight_decay": 0.0}},
                "scheduler": {
                    "class_path": "torch.optim.lr_scheduler.ReduceLROnPlateau",
                    "init_args": {"mode": "min", "factor": 0.1, "patience": 0},
                },
            },
        },
        "data": {"class_path": f"{module}.MNISTDataModule", "init_args": {"num_workers": 2}},
        "trainer": {"max_epochs": 3},
    }


def diff_lines(text: str) -> str:
    """A guide's diff lines without their ``-``/``+``/`` `` column, so that an edit can be found in them."""
    return "\n".join(line[1:] for line in text.splitlines() if line[:1] in "-+ ")


@pytest.fixture(autouse=True)
def _foreign_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "foreign.yaml"))


def test_the_guides_two_edits_make_the_template_module_fit_stop_and_resume_exactly(
    cli: ModuleType, capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = Path("as_written.yaml")
    written.write_text(yaml.safe_dump(config("hydra_template")))
    line = refused(capsys, lambda: cli.main(["fit", "-c", str(written), "--trainer.max_epochs=1"]))
    assert "optimizer: Problem with given class_path 'torch.optim.Adam'" in line, line  # the line the guide shows

    source = (TESTS / "hydra_template.py").read_text()
    guide = diff_lines(GUIDE.read_text())
    for before, after in EDITS:
        assert source.count(before) == 1, before
        changed = set(before.splitlines()) ^ set(after.splitlines())  # the lines removed and added
        for line in changed:
            assert line in guide, f"the guide does not show: {line}"
        source = source.replace(before, after)
    Path("migrated.py").write_text(source)
    monkeypatch.syspath_prepend(str(in_tmp))  # this process, and (PYTHONPATH) the one launched below
    monkeypatch.setenv("PYTHONPATH", f"{in_tmp}:{os.environ.get('PYTHONPATH', '')}")
    Path("migrated.yaml").write_text(yaml.safe_dump(config("migrated")))

    straight, stopped = in_tmp / "runs/foreign/straight", in_tmp / "runs/foreign/stopped"
    assert fit_exit_code(cli, straight, "-c", "migrated.yaml") == 0
    # Its own session and process group, signalled from outside it after the backward pass of step 5 (epoch 1).
    group = fault("SignalFromOutside", phase="train", signum=int(signal.SIGTERM), target="group", step=5)
    args = ["fit", "-c", "migrated.yaml", *run_dir_flags(stopped), group]
    done = launch(PACKAGE, *args, cwd=in_tmp, wrapper=("setsid",))
    assert done.returncode == 143, done.stdout[-3000:]
    assert last_checkpoint(stopped)["global_step"] == 6
    resume = ["-c", str(stopped / "config.yaml"), "--ckpt_path=last", "--trainer.callbacks=[]"]
    assert fit_exit_code(cli, stopped, *resume) == 0
    expected, resumed = last_checkpoint(straight), last_checkpoint(stopped)
    for key in ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch"):
        assert_identical(resumed[key], expected[key], key)
    assert expected["lr_schedulers"][0]["_last_lr"] != [0.002]  # the plateau schedule reduced the LR on the way
