"""runkit/README.md's "What `fit` does, in order" is the order the code runs: a fit is traced, and the functions the
page names (`like_this()`) are first called in the page's order; and one module writes ``provenance.yaml``."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import runkit
from runkit.testing.support import run_dir_flags

KIT_SOURCE = Path(runkit.__file__).resolve().parent
README = KIT_SOURCE.parents[1] / "README.md"


def steps_named(readme: str) -> list[str]:
    """The functions the page's numbered steps name, in the order they are named."""
    section = readme.split("## What `fit` does, in order", 1)[1].split("\n## ", 1)[0]
    steps = section[section.index("\n1. ") :]
    return list(dict.fromkeys(re.findall(r"`(\w+)\(\)`", steps)))


WRITES: list[str] = []  # the kit's file that opened or renamed onto a provenance.yaml, per write, while WATCHING
WATCHING: list[bool] = []


def provenance_writers(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook (``sys.addaudithook``; it cannot be removed, so it acts only while ``WATCHING``)."""
    if not WATCHING or event not in ("open", "os.rename", "os.replace"):
        return
    target, mode = (str(args[0]), str(args[1])) if event == "open" else (str(args[1]), "w")
    if "provenance.yaml" not in target or not any(flag in mode for flag in "wax+"):
        return
    frame = sys._getframe(1)
    while frame is not None and not frame.f_code.co_filename.startswith(str(KIT_SOURCE)):
        frame = frame.f_back
    WRITES.append(str(Path(frame.f_code.co_filename).relative_to(KIT_SOURCE)) if frame else "outside the kit")


sys.addaudithook(provenance_writers)


def first_calls(run: Callable[[], Any]) -> list[str]:
    """The names of the kit's functions ``run`` calls, each at its first call, in order."""
    seen: dict[str, None] = {}

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(str(KIT_SOURCE)):
            seen.setdefault(frame.f_code.co_name, None)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return list(seen)


def test_the_page_names_the_steps() -> None:
    named = steps_named(README.read_text())
    assert named[:3] == ["refused_at_once", "parse_arguments", "check_trackers"]
    assert {"plan_run", "acquire", "save_config", "kit_callbacks", "start_session", "end_session"} <= set(named)


def test_a_fit_runs_the_steps_in_the_order_the_page_gives(cli: ModuleType, in_tmp: Path) -> None:
    run = Path("runs/fixture/order")
    WATCHING.append(True)
    try:
        called = first_calls(lambda: cli.main(["fit", *run_dir_flags(run), "--trainer.max_epochs=1"]))
    finally:
        WATCHING.clear()
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert len(WRITES) > 2  # the session's start and end, and each checkpoint's record
    assert set(WRITES) == {"run/provenance.py"}  # the one writer, from the loop and from the background save
    named = steps_named(README.read_text())
    assert [name for name in named if name not in called] == []  # each step ran
    assert sorted(named, key=called.index) == named
