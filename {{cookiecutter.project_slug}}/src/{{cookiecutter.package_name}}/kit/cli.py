"""The command line: ``fit``/``validate``/``test``/``predict`` and the kit's subcommands, driven by YAML configs.

Every command starts from the project's ``configs/default.yaml`` (a jsonargparse default config file), so
``fit`` alone trains the default run and any preset runs alone or stacked. ``model.class_path`` and
``data.class_path`` select any LightningModule and LightningDataModule; the safeguards (exact resume,
preemption, the non-finite stop, atomic checkpoint writes, ``last.ckpt``) are registered here, in code, so
no config can drop them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from .checkpoint_io import AtomicCheckpointIO
from .checkpoints import (
    BestCheckpoint,
    LastCheckpoint,
    check_checkpoint,
    checkpoint_dir,
    read_checkpoint,
    resolve_ckpt_path,
)
from .data_checks import InvalidDataError
from .monitoring import EpochMonitor, ModelSummary, ThroughputMonitor
from .memory import MemoryBudget
from .nonfinite import NonFiniteLossError, StopOnNonFiniteLoss
from .preemption import Preemption
from .protocol import LINKED_ATTRIBUTES
from .resume import ExactResume
from .runs import RunDirectory
from .trainer import EXTRA_SUBCOMMANDS, ProjectTrainer

DEFAULT_CONFIG_ENV = "KIT_DEFAULT_CONFIG"
"""Environment variable naming the config every command starts from (empty: none); unset: ``configs/default.yaml``."""

# Special values of `--ckpt_path` that Lightning resolves itself.
_LIGHTNING_CKPT_ALIASES = {"hpc", "registry"}


class ProjectCLI(LightningCLI):
    """LightningCLI with the data's shape linked into the model, the safeguards always on, and ``--ckpt_path best``."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {**LightningCLI.subcommands(), **EXTRA_SUBCOMMANDS}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The datamodule is the one place these numbers are set; the model follows it. jsonargparse skips a
        # link whose source attribute or target argument does not exist (see protocol.py).
        for name in LINKED_ATTRIBUTES:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")
        parser.add_class_arguments(RunDirectory, "run")
        # Always present, each configurable by its own key from presets and flags.
        parser.add_lightning_class_args(BestCheckpoint, "best_checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        super().parse_arguments(parser, args)
        # LightningCLI reads a checkpoint file's hyperparameters right after parsing: refuse a broken or
        # unsafe file before it does, with a message instead of a traceback.
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if isinstance(ckpt_path, str) and Path(ckpt_path).is_file():
            try:
                read_checkpoint(ckpt_path)
            except ValueError as error:
                parser.error(str(error))

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        config = self._get(self.config_init, "trainer", default={})
        # `enable_progress_bar: null` (the default) means: a bar on a terminal, none in CI logs or pipes.
        if config.get("enable_progress_bar") is None:
            kwargs.setdefault("enable_progress_bar", interactive())
        kwargs["plugins"] = with_atomic_checkpoint_io(config.get("plugins"))
        if config.get("logger") in (None, True):  # not configured: TensorBoard events in the run directory
            kwargs["logger"] = self._get(self.config_init, "run").logger(config.get("default_root_dir") or ".")
        kwargs["callbacks"] = [*_as_list(config.get("callbacks")), *kit_callbacks(config)]
        return super().instantiate_trainer(**kwargs)

    def before_validate(self) -> None:
        self._resolve_ckpt_path()

    def before_test(self) -> None:
        self._resolve_ckpt_path()

    def before_predict(self) -> None:
        self._resolve_ckpt_path()

    def before_export(self) -> None:
        self._resolve_ckpt_path()

    def before_fit(self) -> None:
        self._resolve_ckpt_path()

    def _resolve_ckpt_path(self) -> None:
        """Turns ``--ckpt_path best|last`` into this run's file, and checks the checkpoint before anything runs.

        Lightning finds ``best`` only in the process that trained, and warns when several checkpoint
        callbacks exist; a file path avoids both. A bad checkpoint exits 2 here, with every file untouched.
        """
        config = self.config_init[self.subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path is None or ckpt_path in _LIGHTNING_CKPT_ALIASES:
            return
        try:
            path = resolve_ckpt_path(ckpt_path, self.trainer, fitting=self.subcommand == "fit")
            if path is not None:
                check_checkpoint(path, self.model)
        except ValueError as error:
            self.parser.error(str(error))
        if path is None:
            folder = checkpoint_dir(self.trainer)
            rank_zero_info(f"--ckpt_path last: nothing to resume in {folder} yet; training starts from scratch")
        config["ckpt_path"] = path


def kit_callbacks(trainer_config: dict[str, Any]) -> list[pl.Callback]:
    """The callbacks every run gets, whatever ``trainer.callbacks`` holds: safeguards, then observability.

    Settings come from their own keys (``best_checkpoint``, ``last_checkpoint``) and the Trainer's switches.
    """
    callbacks: list[pl.Callback] = [ExactResume(), Preemption(), StopOnNonFiniteLoss()]
    callbacks += [EpochMonitor(), ThroughputMonitor(), MemoryBudget()]
    if trainer_config.get("logger") is not False:
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    if trainer_config.get("enable_model_summary") is not False:
        callbacks.append(ModelSummary(max_depth=3))
    return callbacks


def with_atomic_checkpoint_io(plugins: Any) -> list[Any]:
    """``trainer.plugins`` plus ``AtomicCheckpointIO``, unless the config chose another checkpoint plugin."""
    configured = _as_list(plugins)
    if any(isinstance(plugin, CheckpointIO) for plugin in configured):
        return configured
    return [*configured, AtomicCheckpointIO()]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def interactive() -> bool:
    """Whether a person watches: stderr (where progress bars go) is a terminal and ``CI`` is not set."""
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() in {"", "0", "false"}


def default_config_files() -> list[str]:
    """The config every command starts from: ``$KIT_DEFAULT_CONFIG``, else the project's ``configs/default.yaml``.

    Found next to the package (a wheel carries it as ``<package>/configs``) or in the source tree.
    """
    if (configured := os.environ.get(DEFAULT_CONFIG_ENV)) is not None:
        return [configured] if configured else []
    package = Path(__file__).resolve().parents[1]
    for folder in (package / "configs", package.parents[1] / "configs"):
        if (folder / "default.yaml").is_file():
            return [str(folder / "default.yaml")]
    return []


def build_cli(
    args: ArgsType = None, run: bool = True, cli_class: Callable[..., ProjectCLI] = ProjectCLI
) -> ProjectCLI:
    """Parses ``args`` (default: ``sys.argv``) and, with ``run``, executes the subcommand.

    ``cli_class``: ``ProjectCLI`` or a subclass with the same settings (``search`` parses and runs trials with its own).
    """
    # Each subcommand has its own parser: give every one the defaults and the no-abbreviations rule. Without
    # `run` there are no subcommands, and the main parser is the one that reads the config.
    settings = {"allow_abbrev": False, "default_config_files": default_config_files()}
    main_parser = {"allow_abbrev": False} if run else settings
    return cli_class(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_class=ProjectTrainer,
        trainer_defaults={"default_root_dir": "runs"},
        seed_everything_default=42,
        auto_configure_optimizers=False,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={**main_parser, **{name: dict(settings) for name in ProjectCLI.subcommands()}},
        args=args,
        run=run,
    )


def main(args: ArgsType = None) -> None:
    """Entry point of the console script and of ``python -m``.

    Exit codes: 0 done; 1 training stopped on bad data or a non-finite loss (one ``error:`` line says where);
    2 bad command line, config or checkpoint; 143 preempted (``last.ckpt`` saved, rerun with ``--ckpt_path last``).
    ``search`` is not a LightningCLI subcommand, which would build the model and data: it starts each trial as a
    ``fit`` from the config (``<package> search --help``; needs the ``search`` extra).
    """
    argv = sys.argv[1:] if args is None else args
    if isinstance(argv, list) and argv[:1] == ["search"]:
        from .search import main as search

        search(argv[1:])
        return
    try:
        build_cli(args)
    except (InvalidDataError, NonFiniteLossError) as error:
        sys.exit(f"error: {error}")
