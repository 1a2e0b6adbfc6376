"""The Trainer with this project's extra subcommands: each public method here is ``<package> <method>``.

LightningCLI builds a subcommand's flags from the method's typed signature and docstring, exactly as
for ``fit``; ``model`` and ``datamodule`` come from the config. Keep each method a thin call into the
module that owns the feature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning.pytorch as pl

from .bad_input import BadInputError
from .checkpoints import read_checkpoint, resolve_ckpt_path
from .export import FILE_NAMES, Exported, check_formats, example_batch, export_dir, export_model, format_report
from .schedule_preview import format_preview, learning_rates

# Subcommand name -> the method arguments that LightningCLI fills from the config, not from flags.
EXTRA_SUBCOMMANDS: dict[str, set[str]] = {"schedule": {"model", "datamodule"}, "export": {"model", "datamodule"}}


class ProjectTrainer(pl.Trainer):
    """``lightning.pytorch.Trainer`` plus the methods listed in ``EXTRA_SUBCOMMANDS``."""

    def schedule(
        self,
        model: pl.LightningModule,
        datamodule: pl.LightningDataModule | None = None,
        points: int = 11,
        width: int = 60,
        height: int = 12,
    ) -> list[float]:
        """Prints the learning rate at key optimizer steps of the configured run, and a plot, without training.

        Args:
            model: The model whose ``configure_optimizers`` builds the schedule.
            datamodule: The data, whose length sets the number of steps.
            points: Evenly spaced steps listed in the table (the step of the highest LR is added).
            width: Columns of the plot.
            height: Rows of the plot.
        """
        for name, value in {"points": points, "width": width, "height": height}.items():
            if value < 2:
                raise BadInputError(f"{name} must be >= 2, got {value}")
        rates = learning_rates(self, model, datamodule)
        print(format_preview(rates, points, width, height))
        return rates

    def export(
        self,
        model: pl.LightningModule,
        datamodule: pl.LightningDataModule,
        ckpt_path: str,
        output_dir: str | None = None,
        overwrite: bool = False,
        formats: tuple[Literal["torch_export", "onnx"], ...] = ("torch_export", "onnx"),
        atol: float = 1e-4,
        max_samples: int = 8,
    ) -> list[Exported]:
        """Exports the model for inference (torch.export ``model.pt2``, ONNX ``model.onnx``), checked against eager.

        Args:
            model: The model, built from the config; its weights come from ``ckpt_path``.
            datamodule: The data; its first predict batch (else the model's ``example_input_array``) is traced
                and used to compare outputs.
            ckpt_path: The weights to export: ``best``, ``last`` or a checkpoint file.
            output_dir: Where the files go; ``null`` means the ``export`` folder of the run that wrote the
                checkpoint (next to its ``checkpoints`` folder).
            overwrite: Replace files an earlier export left in ``output_dir``; without it they are kept and the
                command stops.
            formats: Any of ``torch_export`` and ``onnx`` (ONNX needs the project's ``export`` extra).
            atol: Largest absolute difference from the eager outputs that an exported file may show.
            max_samples: Samples of the first predict batch used to trace and compare (at least 2).
        """
        if max_samples < 2:
            raise BadInputError(f"max_samples must be >= 2 (a batch of 1 would not stay dynamic), got {max_samples}")
        if not atol >= 0:
            raise BadInputError(f"atol must be >= 0, got {atol}")
        check_formats(formats)
        path = resolve_ckpt_path(ckpt_path, self, fitting=False)
        assert path is not None, "only `fit` may start without a checkpoint"
        destination = Path(output_dir) if output_dir is not None else export_dir(Path(path))
        if destination.exists() and not destination.is_dir():
            raise BadInputError(f"output_dir: {destination} is a file, not a folder")
        if not overwrite and (earlier := [name for name in FILE_NAMES.values() if (destination / name).exists()]):
            raise BadInputError(
                f"output_dir: {destination} already holds {', '.join(earlier)} from an earlier export: pass"
                " --overwrite true to replace them, or another --output_dir"
            )
        model.load_state_dict(read_checkpoint(path)["state_dict"])
        exported = export_model(model, example_batch(model, datamodule, max_samples), destination, formats, atol)
        print(format_report(exported))
        return exported
