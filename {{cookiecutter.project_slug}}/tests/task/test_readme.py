"""The README points at files, tests and pages of this project that exist (what it names of runkit's, as
"runkit's `tests/...`" or runkit's `docs/` pages, is runkit's to keep)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from support import PACKAGE, ROOT

PAGES = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
TEXT = re.sub(r"runkit's `[^`]*`", "", PAGES["README.md"])  # runkit's files: not this project's


def test_docs_are_found() -> None:
    assert "## Where your code goes" in PAGES["README.md"]


def test_every_referenced_file_exists() -> None:
    paths = set(re.findall(r"`?((?:<pkg>|configs|tests|scripts|src)/[\w./-]+\.(?:py|yaml|sh|sbatch|md))", TEXT))
    assert len(paths) > 20
    missing = [path for path in paths if not (ROOT / path.replace("<pkg>", f"src/{PACKAGE}")).is_file()]
    assert missing == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_relative_link_resolves(page: str) -> None:
    folder = (ROOT / page).parent
    links = [target.split("#")[0] for target in re.findall(r"\]\(([^)\s]+)\)", PAGES[page])]
    missing = [link for link in links if link and "://" not in link and not (folder / link).exists()]
    assert missing == []


def test_every_referenced_test_exists() -> None:
    # In a cell, `tests/<dir>/test_x.py::name` and every `::other` after it (until the next file) name test functions.
    references = []
    for cell in re.findall(r"tests/(?:task/)?test_\w+\.py::[^|\n]*", TEXT):
        path = ""
        for token in re.findall(r"tests/(?:task/)?test_\w+\.py|::\w+", cell):
            if token.startswith("::"):
                references.append((path, token[2:]))
            else:
                path = token
    assert len(references) >= 2
    missing = [f"{path}::{name}" for path, name in references if f"def {name}(" not in (ROOT / path).read_text()]
    assert missing == []


@pytest.fixture
def readme_examples(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The README's Python examples, importable as the module ``readme_examples``."""
    blocks = re.findall(r"```python\n(.*?)```", PAGES["README.md"], re.DOTALL)
    assert len(blocks) == 3  # data, network, LightningModule
    module = types.ModuleType("readme_examples")
    exec(compile("\n".join(blocks), "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "readme_examples", module)
    return module


@pytest.mark.parametrize(
    "model",
    [["--model=readme_examples.MyModule"], ["--model.init_args.network=readme_examples.MyNet"]],
    ids=["own-module", "own-network-in-the-classifier"],
)
def test_code_examples_train(
    readme_examples: types.ModuleType, cli: types.ModuleType, in_tmp: Path, model: list[str]
) -> None:
    fitted = cli.build_cli(
        [
            "fit",
            "--data=readme_examples.MyData",
            "--data.init_args.num_workers=0",
            *model,
            "--best_checkpoint.monitor=val/loss",
            "--best_checkpoint.mode=min",
            "--trainer.max_epochs=1",
            "--trainer.limit_train_batches=3",
            "--trainer.limit_val_batches=1",
            "--trainer.enable_progress_bar=false",
        ]
    )
    assert fitted.trainer.global_step == 3
    assert fitted.model.hparams["input_shape"] == (1, 28, 28)  # linked from the example's data
    assert list(Path("runs").rglob("best.ckpt"))
