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
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from .bad_input import (
    BadInputError,
    ConfigFile,
    OneLineErrorParser,
    RunFiles,
    SetupPhase,
    check_config_file,
    describe,
    innermost_cause,
)
from .checkpoint_io import AtomicCheckpointIO, CheckpointWriteError
from .checkpoints import (
    BestCheckpoint,
    LastCheckpoint,
    check_checkpoint,
    checkpoint_dir,
    read_checkpoint,
    resolve_ckpt_path,
)
from .data_checks import InvalidDataError
from .memory import MemoryBudget
from .monitoring import EpochMonitor, GradNormMonitor, ModelSummary, ThroughputMonitor
from .nonfinite import NonFiniteLossError, StopOnNonFiniteLoss
from .preemption import Preemption
from .protocol import LINKED_ATTRIBUTES
from .resume import ExactResume
from .runs import RunDirectory
from .task_checks import StartCheck, check_monitor, check_paths, check_task, check_trainer
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

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # Lightning's parser, with a `--config` that names the file and the line of a problem in it.
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={pl.__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ConfigFile, help="Path to a configuration file in YAML.")
        return parser

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
        for path in default_config_files():  # jsonargparse would not name the file
            try:
                check_config_file(path)
            except TypeError as error:
                parser.error(f"{error} (the default config, ${DEFAULT_CONFIG_ENV} or configs/default.yaml)")
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        seed = (self.config[subcommand] if subcommand else self.config).get("seed_everything")
        if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:  # Lightning's traceback
            parser.error(f"seed_everything must be in [0, {2**32 - 1}] (true: a random seed, false: none), got {seed}")
        # LightningCLI reads a checkpoint file's hyperparameters right after parsing: refuse a broken or
        # unsafe file before it does, with a message instead of a traceback.
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        if isinstance(ckpt_path, str) and Path(ckpt_path).is_file():
            try:
                read_checkpoint(ckpt_path)
            except ValueError as error:
                parser.error(str(error))

    def instantiate_classes(self) -> None:
        # Everything is built from the config here: whatever a constructor raises is about a configured value.
        try:
            super().instantiate_classes()
        except Exception as error:
            self._refuse(innermost_cause(error))

    def after_instantiate_classes(self) -> None:
        try:
            check_trainer(self.trainer)
            if self.subcommand in LightningCLI.subcommands():  # the ones that write in the run directory
                check_paths(self.trainer)
            if self.subcommand is not None:
                check_task(self.subcommand, self.model, self.datamodule)
            if self.subcommand == "fit":
                check_monitor(self.trainer, self.model, self.datamodule)
        except BadInputError as error:
            self._refuse(error)

    def _run_subcommand(self, subcommand: str) -> None:
        # A value the task's own hooks refuse (a DataLoader with batch_size 0, an optimizer with a negative LR)
        # surfaces inside the Trainer, after Lightning opened the event file and saved the config: refuse it as
        # bad input, and take back what the command wrote.
        setup = next(c for c in self.trainer.callbacks if isinstance(c, SetupPhase))  # type: ignore[attr-defined]
        files = RunFiles(self.trainer.log_dir or ".") if self.trainer.is_global_zero else None
        try:
            super()._run_subcommand(subcommand)
        except Exception as error:
            if not setup.refuses(error):
                raise
            if files is not None and not setup.trained:
                files.restore()
            self._refuse(error)

    def _refuse(self, error: BaseException) -> NoReturn:
        """Exits 2 with one ``error:`` line saying which key holds the refused value, and why."""
        keys = {BestCheckpoint: "best_checkpoint", LastCheckpoint: "last_checkpoint"}
        self._parser(self.subcommand).error(describe(error, keys), error if isinstance(error, Exception) else None)

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
    callbacks: list[pl.Callback] = [SetupPhase(), StartCheck(), ExactResume(), Preemption(), StopOnNonFiniteLoss()]
    callbacks += [GradNormMonitor(), EpochMonitor(), ThroughputMonitor(), MemoryBudget()]
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


def build_cli(args: ArgsType = None, run: bool = True) -> ProjectCLI:
    """Parses ``args`` (default: ``sys.argv``) and, with ``run``, executes the subcommand."""
    # Each subcommand has its own parser: give every one the defaults and the no-abbreviations rule. Without
    # `run` there are no subcommands, and the main parser is the one that reads the config.
    settings = {"allow_abbrev": False, "default_config_files": default_config_files()}
    main_parser = {"allow_abbrev": False, "prog": __package__.split(".")[0]} if run else settings
    return ProjectCLI(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_class=ProjectTrainer,
        parser_class=OneLineErrorParser,
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

    Exit codes, each failure with one ``error:`` line:

    - 0: done.
    - 1: training stopped: bad data, a non-finite loss, or a checkpoint that cannot be written (what was saved
      before is intact).
    - 2: bad input: command line, config file, a value a class refuses, a task missing a method the
      subcommand needs, a checkpoint that cannot be used. Nothing is written (see ``bad_input.py``).
    - 143: preempted (``last.ckpt`` saved, rerun with ``--ckpt_path last``).
    """
    try:
        build_cli(args)
    except (InvalidDataError, NonFiniteLossError, CheckpointWriteError) as error:
        sys.exit(f"error: {error}")
