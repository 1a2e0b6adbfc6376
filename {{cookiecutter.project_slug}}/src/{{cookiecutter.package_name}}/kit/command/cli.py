"""The command line: ``fit``/``validate``/``test``/``predict`` and the kit's subcommands, driven by YAML configs.

Every command starts from the project's ``configs/default.yaml`` (a jsonargparse default config file), so
``fit`` alone trains the default run and any preset runs alone or stacked. ``model.class_path`` and
``data.class_path`` select any LightningModule and LightningDataModule; the safeguards (exact resume,
preemption, the non-finite stop, atomic checkpoint writes, ``last.ckpt``) are registered here, in code, so
no config can drop them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl
from jsonargparse import auto_cli
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_only

from ..protocol import LINKED_ATTRIBUTES
from ..safety.checkpoint_io import CheckpointWriteError
from ..safety.checkpoints import BestCheckpoint, LastCheckpoint, check_checkpoint, read_checkpoint
from ..safety.data_checks import InvalidDataError
from ..safety.nonfinite import NonFiniteError
from ..safety.signals import INTERRUPTED_EXIT_CODE, STOP
from ..trackers.checks import check_trackers, resolve_trackers
from ..trackers.placement import in_run
from .always_on import as_list, kit_callbacks, with_atomic_checkpoint_io
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
from .provenance import Provenance, RunRecord, describe_origin
from .runs import LIGHTNING_ALIASES, RunDirectory, list_runs, plan_run
from .task_checks import check_folder, check_monitor, check_paths, check_task, check_trainer
from .trainer import EXTRA_SUBCOMMANDS, ProjectTrainer

DEFAULT_CONFIG_ENV = "KIT_DEFAULT_CONFIG"
"""Environment variable naming the config every command starts from (empty: none); unset: ``configs/default.yaml``."""


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
        given = sys.argv[1:] if args is None else args if isinstance(args, (list, tuple)) else [repr(args)]
        self.command = [__package__.split(".")[0], *map(str, given)]  # recorded in the run's provenance
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

    def before_instantiate_classes(self) -> None:
        if self.subcommand in (None, "fit"):  # the commands that track a run (see trackers.py)
            config = self.config[self.subcommand] if self.subcommand else self.config
            try:
                resolve_trackers(config.trainer)
                check_trackers(config.trainer, config.run, config.get("ckpt_path"))
            except BadInputError as error:
                self._refuse(error)

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
            if self.subcommand == "fit":
                check_monitor(self.trainer, self.model, self.datamodule)
        except BadInputError as error:
            self._discard_new_run()  # created when the Trainer was built: nothing ran in it
            self._refuse(error)

    def _refuse(self, error: BaseException) -> NoReturn:
        """Exits 2 with one ``error:`` line saying which key holds the refused value, and why."""
        self._parser(self.subcommand).error(refusal(error), error if isinstance(error, Exception) else None)

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        config = self._get(self.config_init, "trainer", default={})
        # `enable_progress_bar: null` (the default) means: a bar on a terminal, none in CI logs or pipes.
        if config.get("enable_progress_bar") is None:
            kwargs.setdefault("enable_progress_bar", interactive())
        kwargs["plugins"] = with_atomic_checkpoint_io(config.get("plugins"))
        if self.subcommand is not None:  # before a run directory exists (BadInputError: refused, exit 2)
            check_task(self.subcommand, self.model, self.datamodule)
            check_folder("trainer.default_root_dir", config.get("default_root_dir"))
        directory, callbacks = self._prepare_run(config)
        kwargs["default_root_dir"] = str(directory)  # everything the Trainer writes by itself goes there too
        kwargs["logger"] = self._logger(directory)  # every tracker writes where the run is (trackers.py)
        kit_config = {**config, "logger": kwargs.get("logger", config.get("logger"))}
        kwargs["callbacks"] = [*as_list(config.get("callbacks")), *kit_callbacks(kit_config), *callbacks]
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except BaseException:
            self._discard_new_run()  # a Trainer that cannot be built (bad trainer settings) leaves no run behind
            raise
        if isinstance(trainer, ProjectTrainer):
            trainer.command = (self._parser(self.subcommand), self.config.get(str(self.subcommand), self.config))
        if self.record is not None:
            self._start_session(trainer, self.record)
        return trainer

    def _discard_new_run(self) -> None:
        """Removes the run directory this command created, with the experiment folder if it is left empty."""
        plan, record = getattr(self, "plan", None), getattr(self, "record", None)
        if plan is None or not plan.create or record is None or not record.writer or not record.directory.is_dir():
            return
        shutil.rmtree(record.directory)
        with contextlib.suppress(OSError):
            os.removedirs(record.directory.parent)
        self.record = None

    def _prepare_run(self, trainer_config: dict[str, Any]) -> tuple[Path, list[pl.Callback]]:
        """Decides the run directory and the checkpoint to load (see ``runs.py``), and creates the run for ``fit``.

        Every check comes first: a bad checkpoint or a run that would be overwritten exits 2 with every file
        untouched. Only the process of global rank 0 creates a run (the one Lightning's DDP launcher starts the
        others from): other processes get its directory through ``trainer.log_dir``, which Lightning broadcasts.
        """
        subcommand = self.subcommand
        # `fast_dev_run` writes no checkpoints and no logs: it gets no run either.
        fitting = subcommand == "fit" and not trainer_config.get("fast_dev_run")
        ckpt_path = self.config_init[subcommand].get("ckpt_path") if subcommand else None
        run = self._get(self.config_init, "run")
        self.plan, self.record, self.origin = None, None, None
        writer = is_global_zero_process()
        try:
            plan = plan_run(run, Path(trainer_config.get("default_root_dir") or "."), fitting, ckpt_path, writer)
            if plan.ckpt_path is not None and plan.ckpt_path not in LIGHTNING_ALIASES:
                check_checkpoint(plan.ckpt_path, self.model)
                loaded = read_checkpoint(plan.ckpt_path)  # mapped, not read: cheap even for large files
                self.origin = {key: loaded.get(key) for key in ("epoch", "global_step", "provenance")}
        except ValueError as error:
            self.parser.error(str(error))
        if subcommand and ckpt_path is not None:
            self.config_init[subcommand]["ckpt_path"] = plan.ckpt_path
        if ckpt_path == "last" and fitting and plan.ckpt_path is None:
            rank_zero_info(
                f"--ckpt_path last: nothing to resume in {plan.directory or plan.experiment_dir} yet;"
                " training starts from scratch"
            )
        self.plan = plan
        if not fitting:
            if self.origin is not None:
                rank_zero_info(describe_origin(self.origin, str(plan.ckpt_path)))
            return plan.directory or plan.experiment_dir, []
        directory = plan.make(run.name) if writer else plan.directory or plan.experiment_dir / "<new run>"
        if plan.resumed:
            rank_zero_info(f"Resuming run {directory} from {plan.ckpt_path}")
        self.record = RunRecord(directory, writer)
        if writer and not (directory / "config.yaml").exists():
            # Written once, by the fit that creates the run, naming the run: `fit -c <run>/config.yaml
            # --ckpt_path last` resumes exactly this one. Other commands and resumes leave it as it is.
            self.config[subcommand]["run"]["name"] = directory.name
            self._parser(subcommand).save(
                self.config[subcommand], directory / "config.yaml", skip_none=False, overwrite=False
            )
        saved = (directory / "config.yaml").read_text() if (directory / "config.yaml").is_file() else ""
        return directory, [Provenance(self.record, saved)]

    def _logger(self, directory: Path) -> list[Logger] | bool:
        # Only `fit` logs: evaluating a checkpoint writes no events into its run (their steps would restart
        # at 0 on the run's curves); the metrics are printed as a table. Objects built without a subcommand
        # (`run=False`, for a `fit` called in code) log into the named run or the experiment folder.
        if self.subcommand is not None and self.record is None:
            return False
        logged = None
        if self.plan is not None and self.plan.resumed and self.origin is not None:
            logged = ((self.origin.get("provenance") or {}).get("progress") or {}).get("logged_step")
        # A resumed run continues its curves: each tracker starts after the checkpoint's last logged step.
        purge, built = None if logged is None else logged + 1, self._get(self.config_init, "trainer")["logger"]
        return in_run(self._get(self.config, "trainer")["logger"], built, directory, self.record, purge)

    def _start_session(self, trainer: pl.Trainer, record: RunRecord) -> None:
        config = self.config[self.subcommand]
        seed = config.get("seed_everything")
        seed = seed if isinstance(seed, int) and not isinstance(seed, bool) else None
        record.start_session(trainer, self.command, seed, self.config_init[self.subcommand].get("ckpt_path"))

    def _run_subcommand(self, subcommand: str) -> None:
        """LightningCLI's runner, with the stop signals handled (``safety/signals.py``) and the end of the run's session
        recorded, however it ends.

        A value the task's own hooks refuse (a DataLoader with batch_size 0, an optimizer with a negative LR)
        surfaces inside the Trainer, after Lightning opened its files: it is refused as bad input, and what
        the command wrote is taken back.
        """
        setup = next(c for c in self.trainer.callbacks if isinstance(c, SetupPhase))  # type: ignore[attr-defined]
        files = RunFiles(self.trainer.log_dir or ".") if self.trainer.is_global_zero else None
        with STOP.installed():
            try:
                super()._run_subcommand(subcommand)
            except BaseException as error:
                if isinstance(error, Exception) and setup.refuses(error):
                    if not setup.trained:
                        if files is not None:
                            files.restore()
                        self._discard_new_run()
                    self._refuse(error)
                if self.record is not None:
                    self.record.end_session(error)
                raise
        if self.record is not None:
            self.record.end_session(None)


def refusal(error: BaseException) -> str:
    """The ``error:`` line's text for a refused value: which key holds it, and why."""
    return describe(error, {BestCheckpoint: "best_checkpoint", LastCheckpoint: "last_checkpoint"})


def is_global_zero_process() -> bool:
    """Whether this process will be global rank 0, known before any process group exists (from the launcher's
    environment: torchrun's ``RANK``, SLURM's ``SLURM_PROCID``, Lightning's ``LOCAL_RANK`` and ``NODE_RANK``)."""
    node = os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK") or "0"
    return rank_zero_only.rank == 0 and node == "0"


def interactive() -> bool:
    """Whether a person watches: stderr (where progress bars go) is a terminal and ``CI`` is not set."""
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() in {"", "0", "false"}


def default_config_files() -> list[str]:
    """The config every command starts from: ``$KIT_DEFAULT_CONFIG``, else the project's ``configs/default.yaml``.

    Found next to the package (a wheel carries it as ``<package>/configs``) or in the source tree.
    """
    if (configured := os.environ.get(DEFAULT_CONFIG_ENV)) is not None:
        return [configured] if configured else []
    package = Path(__file__).resolve().parents[2]
    for folder in (package / "configs", package.parents[1] / "configs"):
        if (folder / "default.yaml").is_file():
            return [str(folder / "default.yaml")]
    return []


def build_cli(args: ArgsType = None, run: bool = True, cli_class: Callable[..., ProjectCLI] = ProjectCLI) -> ProjectCLI:
    """Parses ``args`` (default: ``sys.argv``) and, with ``run``, executes the subcommand.

    ``cli_class``: ``ProjectCLI`` or a subclass with the same settings (``search`` parses and runs trials with its own).
    """
    # Each subcommand has its own parser: give every one the defaults and the no-abbreviations rule. Without
    # `run` there are no subcommands, and the main parser is the one that reads the config.
    settings = {"allow_abbrev": False, "default_config_files": default_config_files()}
    # `runs` and `search` are dispatched by `main` before this parser: name them in its help.
    epilog = "Also: `runs` lists the runs; `search` runs a hyperparameter search (each: `<command> --help`)."
    main_parser = {"allow_abbrev": False, "prog": __package__.split(".")[0], "epilog": epilog} if run else settings
    return cli_class(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_class=ProjectTrainer,
        parser_class=OneLineErrorParser,
        trainer_defaults={"default_root_dir": "runs"},
        seed_everything_default=42,
        auto_configure_optimizers=False,
        save_config_callback=None,  # the run's config is written once, by the fit that creates the run
        parser_kwargs={**main_parser, **{name: dict(settings) for name in ProjectCLI.subcommands()}},
        args=args,
        run=run,
    )


def main(args: ArgsType = None) -> None:
    """Entry point of the console script and of ``python -m``.

    Exit codes, each failure with one ``error:`` line:

    - 0: done.
    - 1: training stopped: bad data, non-finite numbers, or a checkpoint that cannot be written (what was saved
      before is intact).
    - 2: bad input: command line, config file, a value a class refuses, a task missing a method the
      subcommand needs, a checkpoint that cannot be used. Nothing is written (see ``bad_input.py``).
    - 130: interrupted (Ctrl-C; ``fit`` finished the optimizer step and saved ``last.ckpt``).
    - 143: preempted (SIGTERM; ``fit`` saved ``last.ckpt``: rerun with ``--ckpt_path last``).

    ``runs`` (list the runs) is handled before LightningCLI: it needs no model, data or config. Neither is
    ``search``, which would otherwise build the model and data: it starts each trial as a ``fit`` from the
    config (``<package> search --help``; needs the ``search`` extra).
    """
    argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
    if argv[:1] == ["search"]:
        from ..search import main as search

        search(argv[1:])
        return
    try:
        if argv[:1] == ["runs"]:
            auto_cli(list_runs, args=argv[1:], prog=f"{__package__.split('.')[0]} runs")
            return
        build_cli(args)
    except (InvalidDataError, NonFiniteError, CheckpointWriteError) as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:  # before or after a subcommand runs (during one, it is `Interrupted`)
        sys.exit(INTERRUPTED_EXIT_CODE)
