"""The command line: ``fit``/``validate``/``test``/``predict`` and the kit's subcommands, driven by YAML configs.

Every command starts from the project's ``configs/default.yaml`` (a jsonargparse default config file), so
``fit`` alone trains the default run and any preset runs alone or stacked. ``model.class_path`` and
``data.class_path`` select any LightningModule and LightningDataModule; the safeguards (exact resume,
preemption, the non-finite stop, atomic checkpoint writes, ``last.ckpt``) are registered here, in code, so
no config can drop them.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl
import yaml
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..bad_input import (
    BadInputError,
    RunFiles,
    SetupPhase,
    describe,
    innermost_cause,
    refused_parse,
)
from ..lightning_internals import CLIInternals, FitKeepsItsModel, check_object_storage_without_imports
from ..observe.first_screen import quiet_lightning
from ..project import Project, drop_unlanded_links
from ..run.config import follow_the_folder, with_newest_run_config
from ..run.facts import drawn_seed
from ..run.folders import RunDirectory
from ..run.session import RunSession
from ..safety.checkpoints import BestCheckpoint, LastCheckpoint
from ..safety.lost_process import exit_if_lost
from ..safety.lost_store import exit_if_store_lost, threads_quiet_when_store_lost
from ..safety.signals import STOP
from ..subcommands import SUBCOMMANDS, CommandLine
from ..trackers.placement import for_session
from .always_on import as_list, trainer_arguments, with_sharded_checkpoints
from .checkpoint_model import SaysReplacedModel
from .config_files import ConfigFile, refused_config_files
from .help_text import Formatter, HelpfulParser, subcommand_help
from .task_checks import check_folder, check_monitor, check_paths, check_task, check_trainer
from .tracker_checks import check_trackers, resolve_trackers
from .trainer import trainer_class, trainer_subcommands


class SharedWhenCopied:
    """A model's optimizer callable holds the CLI (jsonargparse's instantiator): a deep copy of the model (EMA,
    SWA) shares the one CLI, not a copy of its trainer, data and run lock (which cannot be copied)."""

    def __deepcopy__(self, memo: dict[int, object]) -> SharedWhenCopied:
        return self


class ProjectCLI(SharedWhenCopied, SaysReplacedModel, FitKeepsItsModel, CLIInternals, LightningCLI):
    """LightningCLI with the project's links and starting configs, the safeguards always on, and run folders."""

    def __init__(self, *args: Any, project: Project, only: str | None = None, **kwargs: Any) -> None:
        self.project, self.only = project, only
        super().__init__(*args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        # Only the asked subcommand's parser is built (each costs ~0.05 s); all of them for the top-level help.
        every = every_subcommand()
        return {self.only: every[self.only]} if self.only in every else every

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # Lightning's parser, with a `--config` that names the file and the line of a problem in it.
        kwargs.setdefault("dump_header", [f"lightning.pytorch=={pl.__version__}"])
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ConfigFile, help="Path to a configuration file in YAML.")
        return parser

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The project's links (its cli.py): jsonargparse skips a link whose source attribute or target argument
        # does not exist; `drop_unlanded_links` keeps such a value out of the checkpoint too.
        for source, target in self.project.links.items():
            parser.link_arguments(source, target, apply_on="instantiate")
        parser.add_class_arguments(RunDirectory, "run")
        # Always present, each set by its own key; `best_checkpoint: null` switches it off (default: follow the loss).
        parser.add_subclass_arguments(BestCheckpoint, "best_checkpoint", required=False, fail_untyped=False)
        parser.set_defaults(best_checkpoint={"class_path": "runkit.BestCheckpoint"})
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        words = [str(a) for a in (sys.argv[1:] if args is None else args if isinstance(args, list | tuple) else [args])]
        self.command = [self.project.program, *words]  # recorded in the run's provenance
        if problem := refused_config_files(self.project.default_config_files(words)):
            parser.error(problem)
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        if (found := with_newest_run_config(parser, subcommand, config, words)) is not None:
            self.config, words = found
            config = self.config[subcommand]
        if problem := refused_parse(config) or follow_the_folder(config, words):
            parser.error(problem)
        if config.get("seed_everything") is True:  # Lightning 2.6 seeds 0 for `true` (see drawn_seed)
            config["seed_everything"] = drawn_seed()

    def before_instantiate_classes(self) -> None:
        if self.subcommand in (None, "fit"):  # the commands that track a run (see trackers.py)
            config = self.config[self.subcommand] if self.subcommand else self.config
            try:
                resolve_trackers(config.trainer)
                check_trackers(config.trainer, config.run, config.get("ckpt_path"))
            except BadInputError as error:
                self._refuse(error)

    def instantiate_classes(self) -> None:  # whatever a constructor raises here is about a configured value
        try:
            super().instantiate_classes()
        except Exception as error:
            self._refuse(innermost_cause(error))

    def instantiate_trainer(self, **kwargs: Any) -> pl.Trainer:
        """Steps 3 to 5 (runkit/README.md): the checks that need no Trainer, the run's folder, lock and
        ``config.yaml`` (``fit``), then the Trainer with the safeguards registered."""
        config = self.config_value(self.config_init, "trainer", default={})
        arguments = self.config_init[self.subcommand] if self.subcommand else self.config_init
        if self.subcommand is not None:  # before a run directory exists (BadInputError: refused, exit 2)
            check_task(self.subcommand, self.model, self.datamodule)
            check_folder("trainer.default_root_dir", config.get("default_root_dir"))
        ckpt_path = arguments.get("ckpt_path")
        if self.subcommand == "predict" and ckpt_path is not None:
            try:
                ckpt_path = predict_with_export(self.model, ckpt_path)
            except ValueError as error:
                self._refuse(error)
        self.session = session = RunSession(self.subcommand)
        run, seed = self.config_value(self.config_init, "run"), arguments.get("seed_everything")
        try:
            ckpt_path = session.prepare(run, config, ckpt_path, self.model, seed)
            if self.subcommand == "fit":
                dumped = yaml.safe_load(self.subcommand_parser("fit").dump(self.config["fit"], skip_none=False))
                session.check_resume(dumped, self.project.links.values(), self.model)
        except ValueError as error:
            session.release()
            self.parser.error(str(error))
        parser, parsed = self.subcommand_parser(self.subcommand), self.config.get(str(self.subcommand), self.config)
        recorders = session.save_config(parser, parsed) if self.subcommand else []
        best = as_list(self.config_value(self.config_init, "best_checkpoint"))  # none: `best_checkpoint: null`
        logger = for_session(session, self.config_value(self.config, "trainer")["logger"], config["logger"])
        kwargs |= trainer_arguments(config, session, logger, [*recorders, *best])
        try:
            trainer = super().instantiate_trainer(**kwargs)
            session.check_processes(trainer)  # a checkpoint whose global batch these processes cannot share
            check_trainer(trainer)
            with_sharded_checkpoints(trainer, session.directory)  # a run in a store: refused
            if self.subcommand == "fit":  # the one that writes in the run directory (the others only read it)
                check_paths(trainer)
                check_monitor(trainer, self.model, self.datamodule)
        except BaseException as error:
            session.discard()  # a Trainer refused or that cannot be built leaves no new run behind, nor a lock
            if isinstance(error, BadInputError):
                self._refuse(error)
            raise
        if self.subcommand:
            session.start(trainer, self.command, self.config[self.subcommand].get("seed_everything"), ckpt_path)
        return trainer

    def after_instantiate_classes(self) -> None:
        drop_unlanded_links(self.project.links, {"model": self.model, "data": self.datamodule})

    def _refuse(self, error: BaseException) -> NoReturn:
        """Exits 2 with one ``error:`` line saying which key holds the refused value, and why."""
        self.subcommand_parser(self.subcommand).error(refusal(error), error if isinstance(error, Exception) else None)

    def run_subcommand(self, subcommand: str, arguments: dict[str, Any]) -> None:
        """Runs the subcommand with its ``arguments`` from the config, ``best``/``last`` resolved to the checkpoint the
        session chose, with the stop signals handled (``safety/signals.py``) and the end of the run's session
        recorded, however it ends.

        A value the task's own hooks refuse (a DataLoader with batch_size 0, an optimizer with a negative LR)
        surfaces inside the Trainer, after Lightning opened its files: it is refused as bad input, and what
        the command wrote is taken back.
        """
        if arguments.get("ckpt_path") is not None:
            arguments["ckpt_path"] = self.session.checkpoint
        method = getattr(self.trainer, subcommand)
        if "command" in inspect.signature(method).parameters:  # the finders write a preset of one of its keys
            arguments["command"] = CommandLine(self.subcommand_parser(subcommand), self.config[subcommand])
        setup = next(c for c in self.trainer.callbacks if isinstance(c, SetupPhase))  # type: ignore[attr-defined]
        files = RunFiles(self.trainer.log_dir or ".") if self.trainer.is_global_zero else None
        with STOP.installed(), self.session.watching(), threads_quiet_when_store_lost():
            if said := STOP.said_ignored():  # the shell's convention wins: nohup's SIGHUP, a background job's SIGINT
                rank_zero_info(said)
            try:
                method(**arguments)
            except BaseException as error:
                if isinstance(error, Exception) and setup.refuses(error):
                    take_back(self, setup.trained, files, error)
                    self._refuse(error)
                exit_if_store_lost(self.session.directory, error, str(self.subcommand), self.session.release)
                self.session.end(error)
                self.session.exit_if_folder_gone(str(self.subcommand))
                exit_if_lost(self.trainer, error, str(self.subcommand))
                raise
        self.session.end(None)


def predict_with_export(model: pl.LightningModule, ckpt_path: str) -> str | None:
    """``predict --ckpt_path <export folder>``: the model's forward becomes the folder's recommended file and no
    checkpoint is loaded (``None``); any other ``ckpt_path`` is returned as it is. Raises ``ValueError`` for a folder
    whose recommended file is missing."""
    if not Path(ckpt_path).is_dir():
        return ckpt_path
    from ..tools.exported_model import is_export_folder, use_export  # only predict from a folder pays for it

    if not is_export_folder(ckpt_path):
        return ckpt_path
    rank_zero_info(use_export(model, ckpt_path))
    return None


def take_back(cli: ProjectCLI, trained: bool, files: RunFiles | None, error: Exception) -> None:
    """What a command refused inside the Trainer leaves: before it trained, nothing (Lightning's files restored, a new
    run removed); once it trained, the run with what it saved, its session ended and its lock given back."""
    if trained:
        cli.session.end(error)
        return
    if files is not None:
        files.restore()
    discard_new_run(cli)


def discard_new_run(cli: ProjectCLI) -> None:
    """Removes the run directory the command created (nothing ran in it)."""
    if (session := getattr(cli, "session", None)) is not None:
        session.discard()


def refusal(error: BaseException) -> str:
    """The ``error:`` line's text for a refused value: which key holds it, and why."""
    return describe(error, {BestCheckpoint: "best_checkpoint", LastCheckpoint: "last_checkpoint"})


def build_cli(
    args: ArgsType = None,
    run: bool = True,
    cli_class: Callable[..., ProjectCLI] = ProjectCLI,
    project: Project | None = None,
) -> ProjectCLI:
    """Parses ``args`` (default: ``sys.argv``) and, with ``run``, executes the subcommand.

    ``cli_class``: ``ProjectCLI`` or a subclass with the same settings (``search`` parses and runs trials with its own).
    ``project``: the project's links and starting configs (its ``cli.py``); none: no links, only ``default.yaml``.
    """
    project = project or Project()
    quiet_lightning()  # Lightning's lines about itself (observe/first_screen.py)
    check_object_storage_without_imports()  # a local run imports no object store's package
    given = sys.argv[1:] if args is None else [str(arg) for arg in args] if isinstance(args, (list, tuple)) else []
    # Each subcommand has its own parser: give every one the defaults and the no-abbreviations rule. Without
    # `run` there are no subcommands, and the main parser is the one that reads the config.
    settings = {"allow_abbrev": False, "default_config_files": project.default_config_files(given)}
    only = next((arg for arg in given if arg in every_subcommand()), None) if run else None
    # `runs`, `search`, ... are dispatched by `main` before this parser: name them in its help.
    own = [f"`{name}`: {entry.summary}" for name, entry in SUBCOMMANDS.items() if entry.kind == "own"]
    epilog = f"Also (each: `{project.program} <subcommand> --help`): {' '.join(own)}"
    program = project.program
    description = f"{program}: trains and evaluates this project's runs; `{program} <subcommand> --help` for each."
    main_parser = {"allow_abbrev": False, "prog": program, "epilog": epilog, "description": description}
    main_parser = main_parser if run else settings
    main_parser["formatter_class"] = Formatter  # the subcommands' parsers take their parent's
    return cli_class(
        pl.LightningModule,
        None,  # any LightningDataModule, or none (`--data null`): a module that brings its own loaders
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_class=trainer_class([only] if only else every_subcommand() if run else []),
        parser_class=HelpfulParser,
        trainer_defaults={"default_root_dir": "runs"},
        seed_everything_default=42,
        auto_configure_optimizers=True,  # `--optimizer Adam --lr_scheduler StepLR`, as Lightning's CLI docs show
        save_config_callback=None,  # the run's config is written once, by the fit that creates the run
        parser_kwargs={
            **main_parser,
            **{
                name: {**settings, **subcommand_help(program, name)}
                for name in every_subcommand()
                if only in (None, name)
            },
        },
        args=args,
        run=run,
        project=project,
        only=only,
    )


def every_subcommand() -> dict[str, set[str]]:
    """Lightning's subcommands and the kit's, each with the Trainer method arguments its parser leaves out."""
    return {**LightningCLI.subcommands(), **trainer_subcommands()}
