"""The command line: ``fit``/``validate``/``test``/``predict`` driven by YAML configs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from .checkpoints import LastCheckpoint, check_checkpoint, checkpoint_dir, read_checkpoint, resolve_ckpt_path
from .data_checks import InvalidDataError
from .module import Classifier
from .nonfinite import NonFiniteLossError
from .trainer import EXTRA_SUBCOMMANDS, ProjectTrainer

# Special values of `--ckpt_path` that Lightning resolves itself.
_LIGHTNING_CKPT_ALIASES = {"hpc", "registry"}


class ProjectCLI(LightningCLI):
    """LightningCLI with the data's shape linked into the model and ``--ckpt_path best`` across processes."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {**LightningCLI.subcommands(), **EXTRA_SUBCOMMANDS}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The datamodule is the one place these numbers are set; the network and metrics follow it.
        for attribute, target in (
            ("num_classes", "model.num_classes"),
            ("num_classes", "model.network.init_args.num_classes"),
            ("in_channels", "model.network.init_args.in_channels"),
            ("image_size", "model.network.init_args.image_size"),
        ):
            parser.link_arguments(f"data.{attribute}", target, apply_on="instantiate")
        # Always present, and configurable by key (`last_checkpoint.every_n_train_steps`) from presets and flags.
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
        # `enable_progress_bar: null` (the default) means: a bar on a terminal, none in CI logs or pipes.
        if self._get(self.config_init, "trainer.enable_progress_bar") is None:
            kwargs.setdefault("enable_progress_bar", interactive())
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


def interactive() -> bool:
    """Whether a person watches: stderr (where progress bars go) is a terminal and ``CI`` is not set."""
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() in {"", "0", "false"}


def build_cli(args: ArgsType = None, run: bool = True) -> ProjectCLI:
    """Parses ``args`` (default: ``sys.argv``) and, with ``run``, executes the subcommand."""
    return ProjectCLI(
        Classifier,
        pl.LightningDataModule,
        subclass_mode_data=True,
        trainer_class=ProjectTrainer,
        seed_everything_default=42,
        auto_configure_optimizers=False,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"allow_abbrev": False},
        args=args,
        run=run,
    )


def main(args: ArgsType = None) -> None:
    """Entry point of the console script and of ``python -m``.

    Exit codes: 0 done; 1 training stopped on bad data or a non-finite loss (one ``error:`` line says where);
    2 bad command line, config or checkpoint; 143 preempted (``last.ckpt`` saved, rerun with ``--ckpt_path last``).
    """
    try:
        build_cli(args)
    except (InvalidDataError, NonFiniteLossError) as error:
        sys.exit(f"error: {error}")
