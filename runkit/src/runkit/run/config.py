"""A run's own ``config.yaml`` names the run: the folder that holds it, whatever the file says.

``fit -c runs/x/b/config.yaml --ckpt_path last`` continues ``runs/x/b``, even when the folder was copied from
``runs/x/a`` (its config still says ``run.name: a``) or moved to another disk (``trainer.default_root_dir`` still says
where it was): the run name, experiment and root follow the folder. A flag that names another run with such a file
(``--run.name c``) is refused: which run was meant cannot be told.

``validate``, ``test``, ``predict`` and ``export`` with ``--ckpt_path best|last`` and no run named (no run config,
no ``run.name``, no experiment chosen by a flag or a ``-c`` file) take the newest run under the root that has that
checkpoint, in any experiment, and read its ``config.yaml`` first: its model, data and settings, not the example's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..project import SUBCOMMANDS
from ..store import RunPath, location
from .folders import ALIASES, CHECKPOINTS, runs
from .records import FILE

CONFIG = "config.yaml"
EVALUATING = ("validate", "test", "predict", "export")
"""The commands that evaluate a run's checkpoint, rather than train one."""
RUN_KEYS = {"run.name": "name", "run.experiment": "experiment", "trainer.default_root_dir": "root"}


def config_files(args: Sequence[str]) -> list[RunPath]:
    """The ``-c``/``--config`` files of a command line, in order."""
    found = []
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag in ("-c", "--config"):
            path = value if equals else (args[index + 1] if index + 1 < len(args) else "")
            if path and not path.lstrip().startswith(("{", "[")):
                found.append(location(path))
    return found


def run_config(args: Sequence[str]) -> RunPath | None:
    """The last ``-c`` file that is a run's own ``config.yaml`` (its folder holds the run's record), or ``None``."""
    own = [path for path in config_files(args) if path.name == CONFIG and (path.parent / FILE).is_file()]
    return own[-1] if own else None


def flags_given(args: Sequence[str]) -> set[str]:
    """The run keys (``run.name``, ``run.experiment``, ``trainer.default_root_dir``) set by a flag."""
    given = set()
    for arg in args:
        flag = arg.partition("=")[0]
        for key in RUN_KEYS:
            if flag == f"--{key}" or (flag == "--run" and key.startswith("run.")):
                given.add(key)
    return given


def chosen_in_files(args: Sequence[str], key: str) -> bool:
    """Whether a ``-c`` file of the command sets ``key`` (``run.experiment``), at the top or under a subcommand."""
    section, name = key.split(".")
    for path in config_files(args):
        try:
            content = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # the parser names the file and the problem
        if not isinstance(content, dict):
            continue
        for part in [content, *(content[s] for s in SUBCOMMANDS if isinstance(content.get(s), dict))]:
            if isinstance(part.get(section), dict) and name in part[section]:
                return True
    return False


def newest_evaluated_run(subcommand: str | None, config: Any, args: Sequence[str]) -> RunPath | None:
    """The run whose config an evaluating command with ``--ckpt_path best|last`` and no run named should read: the
    newest under the root with that checkpoint, in any experiment. ``None`` where the command names its run."""
    ckpt_path = config.get("ckpt_path")
    if subcommand not in EVALUATING or ckpt_path not in ALIASES or run_config(args) is not None:
        return None
    if config.run.name is not None or "run.experiment" in flags_given(args) or chosen_in_files(args, "run.experiment"):
        return None  # the run, or its experiment, is named: folders.plan_run finds it
    root = location(config.trainer.default_root_dir or "runs")
    filename = f"{ckpt_path}.ckpt"
    folders = sorted(root.iterdir(), key=str) if root.is_dir() else []
    found = [run for folder in folders if folder.is_dir() for run in runs(folder)]
    having = [run for run in found if (run / CHECKPOINTS / filename).is_file()]
    return max(having, key=lambda run: (run / FILE).stat().st_mtime) if having else None


def with_newest_run_config(
    parser: Any, subcommand: str | None, config: Any, args: Sequence[str]
) -> tuple[Any, list[str]] | None:
    """The command's arguments with the newest run's config first, and them parsed, where ``newest_evaluated_run``
    finds one (one line says which run); ``None`` otherwise."""
    if (run := newest_evaluated_run(subcommand, config, args)) is None:
        return None
    rank_zero_info(f"{subcommand}: the newest run with a {config.ckpt_path}.ckpt is {run}: its config.yaml first")
    args = with_config_first(args, str(subcommand), run / CONFIG)
    return parser.parse_args(args), args


def with_config_first(args: Sequence[str], subcommand: str, path: RunPath) -> list[str]:
    """``args`` with ``-c path`` right after the subcommand: the command's own files and flags still win."""
    at = list(args).index(subcommand) + 1
    return [*args[:at], f"--config={path}", *args[at:]]


def follow_the_folder(config: Any, args: Sequence[str]) -> str | None:
    """Makes ``config`` name the run whose ``config.yaml`` the command reads (see the module); returns why it
    cannot (a flag names another run), or ``None``."""
    path = run_config(args)
    if path is None:
        return None
    folder = path.resolve().parent
    wanted = {"run.name": folder.name, "run.experiment": folder.parent.name, "trainer.default_root_dir": None}
    named = location(config.trainer.default_root_dir or "runs") / config.run.experiment / (config.run.name or "")
    if config.run.name is not None and named.resolve() == folder:
        return None
    for key in sorted(flags_given(args)):
        flag_value = config.get(key)
        disagrees = (
            location(flag_value or "runs").resolve() != folder.parent.parent
            if key == "trainer.default_root_dir"
            else flag_value != wanted[key]
        )
        if disagrees:
            return (
                f"--{key} {flag_value} names another run than {folder}, whose config.yaml this command reads: drop"
                f" the flag (the folder that holds config.yaml is the run), or pass another run's config"
            )
    config.run.name, config.run.experiment = folder.name, folder.parent.name
    config.trainer.default_root_dir = str(folder.parent.parent)
    return None
