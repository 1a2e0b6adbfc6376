"""The command line: ``fit``/``validate``/``test``/``predict`` driven by YAML configs."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI

from .module import Classifier
from .trainer import EXTRA_SUBCOMMANDS, ProjectTrainer

# Special values of `--ckpt_path` that Lightning resolves itself.
_LIGHTNING_CKPT_ALIASES = {"last", "hpc", "registry"}


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

    def before_validate(self) -> None:
        self._resolve_ckpt_path()

    def before_test(self) -> None:
        self._resolve_ckpt_path()

    def before_predict(self) -> None:
        self._resolve_ckpt_path()

    def before_fit(self) -> None:
        self._resolve_ckpt_path()

    def _resolve_ckpt_path(self) -> None:
        """Fails early on a checkpoint path that does not exist; finds ``best`` in a new process."""
        config = self.config_init[self.subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path is None or ckpt_path in _LIGHTNING_CKPT_ALIASES:
            return
        if ckpt_path == "best":
            callback = self.trainer.checkpoint_callback
            if callback is None or callback.best_model_path:
                return  # Lightning reports the missing callback, or knows the best path already
            ckpt_dir = Path(callback.dirpath or Path(self.trainer.log_dir or ".") / "checkpoints")
            best = ckpt_dir / "best.ckpt"
            if not best.is_file():
                self.parser.error(f"--ckpt_path best: no {best} (has `fit` run with this config?)")
            callback.best_model_path = str(best)
        elif not Path(ckpt_path).is_file():
            self.parser.error(f"--ckpt_path {ckpt_path}: no such checkpoint file")


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
    """Entry point of the console script and of ``python -m``."""
    build_cli(args)
