"""A command loads what it runs: ``fit`` imports none of export, search, the finders or a tracker it does not use;
every subcommand is one entry of ``subcommands.py``; Ctrl-C while the command still imports is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import PACKAGE

from runkit.subcommands import SUBCOMMANDS, of_kind
from runkit.testing.support import child_path

NOT_FOR_FIT = (
    "runkit.search",
    "runkit.tools",
    "runkit.trackers.mlflow_logger",
    "runkit.trackers.wandb_logger",
    "optuna",
    "onnx",
    "onnxruntime",
    "torchao",
    "mlflow",
    "wandb",
    "matplotlib",
    "s3fs",  # Lightning's `_is_dir` imported it wherever installed (lightning_internals.is_object_storage)
    "gcsfs",
    "adlfs",
)


def python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter on the fixture task, in ``cwd``."""
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_plain_fit_loads_no_feature_it_does_not_use(in_tmp: Path) -> None:
    done = python(
        f"""
        import sys
        import {PACKAGE}
        {PACKAGE}.main(["fit", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2"])
        kit = sorted(name for name in sys.modules if name.split(".")[0] == "runkit")
        print("KIT", len(kit), *kit)
        print("LOADED", *sys.modules)
        """,
        in_tmp,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split(" ", 1)[0]: line.split(" ")[1:] for line in done.stdout.splitlines() if " " in line}
    loaded = set(lines["LOADED"])
    assert (Path("runs") / "fixture").is_dir()  # it trained
    assert sorted(name for name in loaded if any(name == p or name.startswith(f"{p}.") for p in NOT_FOR_FIT)) == []
    assert int(lines["KIT"][0]) < 77  # 77 before the registry (runkit 0.2's landing)


def test_a_kit_subcommand_loads_its_own_module_only_when_called(in_tmp: Path) -> None:
    done = python(
        f"""
        import sys
        import {PACKAGE}
        try:
            {PACKAGE}.main(["schedule", "--points=3"])
        finally:
            print("LOADED", *(name for name in sys.modules if name.startswith("runkit.tools")))
        """,
        in_tmp,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = next(line for line in done.stdout.splitlines() if line.startswith("LOADED")).split()[1:]
    assert "runkit.tools.schedule_preview" in loaded
    assert not [name for name in loaded if name.startswith(("runkit.tools.export", "runkit.tools.finders"))]


def test_every_subcommand_is_in_the_top_level_help_and_the_unknown_one_line(in_tmp: Path) -> None:
    helped = python(f"import {PACKAGE}; {PACKAGE}.main(['--help'])", in_tmp)
    assert helped.returncode == 0, helped.stderr[-3000:]
    for name, entry in SUBCOMMANDS.items():
        assert name in helped.stdout
        if entry.kind == "own":  # named in the epilog with its summary; the others are LightningCLI's choices
            assert entry.summary.split(":")[0][:30] in " ".join(helped.stdout.split())
    wrong = python(f"import {PACKAGE}; {PACKAGE}.main(['fitt'])", in_tmp)
    assert wrong.returncode == 2
    assert wrong.stderr.splitlines()[-1] == (
        f"error: no subcommand 'fitt': choose from {', '.join(SUBCOMMANDS)}; did you mean fit?"
    )
    assert set(of_kind("lightning")) == {"fit", "validate", "test", "predict"}


@pytest.mark.parametrize("module", ["lightning.pytorch", "optuna"])
def test_ctrl_c_while_the_command_imports_is_one_line(in_tmp: Path, module: str) -> None:
    # Ctrl-C lands where the command spends its first seconds: importing torch and Lightning (or Optuna for search).
    command = "fit" if module == "lightning.pytorch" else "search"
    done = python(
        f"""
        import sys

        class CtrlC:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    raise KeyboardInterrupt

        sys.meta_path.insert(0, CtrlC())
        import {PACKAGE}
        {PACKAGE}.main([{command!r}])
        """,
        in_tmp,
    )
    assert done.returncode == 130
    assert done.stderr.splitlines() == ["interrupted (Ctrl-C) before the command started"]
    assert not Path("runs").exists()
