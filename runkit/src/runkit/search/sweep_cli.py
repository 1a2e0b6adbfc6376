"""``sweep``'s command line: ``fit``'s config plus the sweep's own keys (``SweepSettings``), and each cell's config.

A cell's ``fit`` config is the sweep's command line with the cell's items added: its group files first (the sweep's
own flags and ``-c`` files win over a preset of a group), then the sweep's arguments, then its key values (which win
over both). It is parsed as ``fit`` parses it (the project's starting configs apply unless the cell names a class),
written into the cell's folder (``cell.yaml``, without the sweep's keys) and trained with ``fit -c cell.yaml``.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from ..command.cli import ProjectCLI
from ..project import Project, current
from .grid import Axis


class SweepSettings:
    """The sweep's own config keys; everything else on the command line is the ``fit`` config of every cell."""

    def __init__(
        self,
        grid: list[Any] | None = None,
        workers: int = 1,
        storage: str | None = None,
        max_cells: int = 1000,
        dry_run: bool = False,
        table: bool = False,
        metric: str | None = None,
        direction: Literal["minimize", "maximize"] | None = None,
        heartbeat_interval: int = 10,
        grace_period: int = 60,
    ) -> None:
        """Configures the sweep.

        Args:
            grid: The axes, each a comma list of config files (a group: one file per cell; an empty item: none)
                or ``key=v1,v2`` (the values of one config key, typed as on ``fit``'s command line); ``--grid``
                once per axis. In YAML a list of files, or ``{key: [values]}``. Every combination is a cell.
            workers: Worker processes this command starts on this machine (each on its own GPUs, where there are
                GPUs); more join with the same command, on this machine or another (see ``storage``).
            storage: ``null``: a journal file in the sweep's folder (one machine, or several on a shared disk);
                a journal file's path; or a database URL such as ``postgresql://user:password@host:5432/db``.
            max_cells: The most cells the sweep runs; a grid with more is refused before any cell runs.
            dry_run: Print each cell's ``fit`` command and exit; nothing is written.
            table: Print the table of this sweep as it is now (finished or running) and write its results files;
                nothing trains.
            metric: The logged metric that ranks cells (its best value over a run); ``null``:
                ``best_checkpoint.monitor``.
            direction: ``minimize`` or ``maximize``; ``null``: from ``best_checkpoint.mode`` (for its metric).
            heartbeat_interval: Seconds between a running cell's heartbeats.
            grace_period: Seconds without a heartbeat after which a cell's worker is taken for dead and the cell is
                run again, from its ``last.ckpt`` (a worker gone from this machine is noticed at once).
        """
        if workers < 1 or max_cells < 1:
            raise ValueError(f"--workers and --max_cells must be >= 1, got {workers} and {max_cells}")
        if heartbeat_interval < 1 or grace_period <= heartbeat_interval:
            raise ValueError(
                f"need 1 <= --heartbeat_interval < --grace_period, got {heartbeat_interval}, {grace_period}"
            )
        self.grid, self.workers, self.storage, self.max_cells = grid or [], workers, storage, max_cells
        self.dry_run, self.table, self.metric, self.direction = dry_run, table, metric, direction
        self.heartbeat_interval, self.grace_period = heartbeat_interval, grace_period


SETTINGS = tuple(inspect.signature(SweepSettings).parameters)


class SweepCLI(ProjectCLI):
    """Parses ``sweep``'s command line: the ``fit`` config plus ``SweepSettings``. Builds nothing."""

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        description = "Sweep: a fit run for every combination of presets and values (--grid), and one table."
        prog = f"{current().program} sweep"
        return super().init_parser(**{"prog": prog, "description": description, **kwargs})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_class_arguments(SweepSettings, None, as_group=True)

    def instantiate_classes(self) -> None:
        """Nothing: every cell builds its own model, data and trainer."""

    def after_instantiate_classes(self) -> None:
        """Nothing to check: each cell's ``fit`` checks its own objects."""


def appended(args: list[str]) -> list[str]:
    """``--grid X`` as jsonargparse appends to a list (``--grid+=X``): each ``--grid`` is one more axis, after the
    axes of a ``-c`` file's ``grid:``."""
    out, index = [], 0
    while index < len(args):
        arg = str(args[index])
        if arg == "--grid" and index + 1 < len(args):
            out.append(f"--grid+={args[index + 1]}")
            index += 2
            continue
        out.append(f"--grid+={arg.removeprefix('--grid=')}" if arg.startswith("--grid=") else arg)
        index += 1
    return out


def fit_words(args: list[str]) -> list[str]:
    """The sweep's arguments without its own settings: what every cell's ``fit`` command line holds."""
    flags = {f"--{name}" for name in SETTINGS} | {"--grid+"}
    out, index = [], 0
    while index < len(args):
        name = str(args[index]).partition("=")[0]
        if name in flags:
            index += 1 if "=" in str(args[index]) else 2
            continue
        out.append(str(args[index]))
        index += 1
    return out


def cell_arguments(axes: tuple[Axis, ...], labels: dict[str, str], words: list[str]) -> list[str]:
    """A cell's arguments: its group files, then ``words`` (the sweep's), then its key values (see the module)."""
    groups = [arg for axis in axes if not axis.key for arg in axis.arguments(labels[axis.name])]
    keys = [arg for axis in axes if axis.key for arg in axis.arguments(labels[axis.name])]
    return [*groups, *words, *keys]


def parsed(parser: LightningArgumentParser, project: Project, args: list[str]) -> Namespace:
    """``args`` parsed as ``fit`` parses them (the project's starting configs unless ``args`` name a class).

    Raises ``ValueError`` with jsonargparse's reason (its last line) when the config refuses ``args``."""
    parser.default_config_files = project.default_config_files(args)
    parser.exit_on_error = False
    try:
        return parser.parse_args(args)
    except Exception as error:  # jsonargparse's ArgumentError, with the reason on its last line
        raise ValueError(str(error).strip().splitlines()[-1].strip()) from None
    finally:
        parser.exit_on_error = True


def fit_config(parser: LightningArgumentParser, project: Project, args: list[str]) -> str:
    """The ``fit`` config of ``args`` (``parsed``) without the sweep's keys, as YAML."""
    config = parsed(parser, project, args)
    fit = yaml.safe_load(parser.dump(config, skip_none=False, skip_validation=True))
    for key in (*SETTINGS, "config"):
        fit.pop(key, None)
    return yaml.safe_dump(fit, sort_keys=False)
