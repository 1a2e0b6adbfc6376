"""The Trainer with this project's extra subcommands: each public method here is ``<package> <method>``.

LightningCLI builds a subcommand's flags from the method's typed signature and docstring, exactly as
for ``fit``; ``model`` and ``datamodule`` come from the config. Keep each method a thin call into the
module that owns the feature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning.pytorch as pl
from jsonargparse import ArgumentParser, Namespace

from ..bad_input import BadInputError
from ..safety.checkpoints import read_checkpoint, resolve_ckpt_path
from ..store import is_remote
from ..tools.export import WRITTEN, Exported, check_formats, example_batch, export_dir, export_model, format_report
from ..tools.finders import Found, batch_size_find, lr_find
from ..tools.program_checks import validation_batches
from ..tools.quantize import check_quantization
from ..tools.quantized_export import QuantizeOptions, check_quantized_formats, export_quantized, format_quantization
from ..tools.schedule_preview import format_preview, learning_rates
from .task_checks import check_folder

# Subcommand name -> the method arguments that LightningCLI fills from the config, not from flags.
EXTRA_SUBCOMMANDS: dict[str, set[str]] = {
    name: {"model", "datamodule"} for name in ("schedule", "export", "lr_find", "batch_size_find")
}


def check_export_dir(destination: Path, overwrite: bool) -> None:
    """Raises ``BadInputError`` naming ``output_dir`` unless ``export`` may put its folder at ``destination``: a folder
    it can create (or replace), empty, or with ``overwrite`` holding an earlier export and nothing else."""
    if destination.exists() and not destination.is_dir():
        raise BadInputError(f"output_dir: {destination} is a file, not a folder")
    check_folder("output_dir", destination.absolute().parent)  # the export is staged next to it, then moved in
    if destination.is_dir():
        check_folder("output_dir", destination)
    held = sorted(path.name for path in destination.iterdir()) if destination.is_dir() else []
    if held and not overwrite:
        source = " from an earlier export" if set(held) <= WRITTEN else ""
        raise BadInputError(
            f"output_dir: {destination} already holds {', '.join(held)}{source}: pass --overwrite true to replace"
            " them, or another --output_dir"
        )
    if foreign := [name for name in held if name not in WRITTEN]:
        raise BadInputError(
            f"output_dir: {destination} holds {', '.join(foreign)}, which no export writes: --overwrite true replaces"
            " the whole folder; choose another --output_dir"
        )


class ProjectTrainer(pl.Trainer):
    """``lightning.pytorch.Trainer`` plus the methods listed in ``EXTRA_SUBCOMMANDS``."""

    command: tuple[ArgumentParser, Namespace] | None = None
    """The parser and parsed config of the command that built this trainer (set by the CLI; the finders write
    presets from it)."""

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
        quantize: Literal["int8_weight_only", "int8_dynamic", "float8"] | None = None,
        quantize_device: Literal["cpu", "cuda"] = "cpu",
        max_accuracy_drop: float = 0.5,
        max_output_error: float = 0.05,
        latency_repeats: int = 30,
        latency_threads: int = 1,
    ) -> list[Exported]:
        """Exports the model for inference (torch.export ``model.pt2``, ONNX ``model.onnx``), checked against eager.

        With ``quantize``, also ``model.<mode>.pt2`` (torchao) and, for ``int8_dynamic``, ``model.int8_dynamic.onnx``
        (ONNX Runtime), each checked on the validation set against the float model, timed against the float file,
        and reported in ``quantization.json`` beside them.

        Args:
            model: The model, built from the config; its weights come from ``ckpt_path``.
            datamodule: The data; its first predict batch (else the model's ``example_input_array``) is traced
                and used to compare outputs.
            ckpt_path: The weights to export: ``best``, ``last`` or a checkpoint file.
            output_dir: The export's folder, written whole (a failed export leaves none); ``null`` means the
                ``export`` folder of the run that wrote the checkpoint (next to its ``checkpoints`` folder).
            overwrite: Replace an earlier export in ``output_dir``, the whole folder; without it the folder is kept and
                the command stops. A folder holding files that no export writes is never replaced.
            formats: Any of ``torch_export`` and ``onnx`` (ONNX needs the project's ``export`` extra).
            atol: Largest absolute difference from the eager outputs that an exported file may show.
            max_samples: Samples of the first predict batch used to trace and compare (at least 2).
            quantize: Also write the model quantized by torchao in this mode (needs the ``export`` extra);
                ``float8`` needs a CUDA GPU of compute capability >= 8.9. ``null``: float files only.
            quantize_device: Where the quantized program is built, checked and timed (float8: ``cuda``).
            max_accuracy_drop: Most points of validation accuracy a quantized classifier may lose; more fails export.
            max_output_error: For a model that is not a classifier: the largest relative RMS difference of the quantized
                outputs from the float ones on the validation set; more fails the export.
            latency_repeats: Timed calls per program and batch size (1 and 64); the median and IQR are recorded.
            latency_threads: CPU threads of torch and ONNX Runtime while timing; 1 holds still on a machine shared with
                other work (two threads on two busy cores read 100x slower); 0: the libraries' defaults.
        """
        if max_samples < 2:
            raise BadInputError(f"max_samples must be >= 2 (a batch of 1 would not stay dynamic), got {max_samples}")
        if not atol >= 0:
            raise BadInputError(f"atol must be >= 0, got {atol}")
        if not max_accuracy_drop >= 0 or not max_output_error >= 0:
            raise BadInputError(
                f"max_accuracy_drop and max_output_error must be >= 0, got {max_accuracy_drop}, {max_output_error}"
            )
        if latency_repeats < 1 or latency_threads < 0:
            raise BadInputError(
                f"latency_repeats must be >= 1 and latency_threads >= 0, got {latency_repeats}, {latency_threads}"
            )
        check_formats(formats)
        then = None
        if quantize is not None:
            try:
                check_quantization(quantize, quantize_device)
                check_quantized_formats(quantize, formats)
                batches = validation_batches(model, datamodule)
            except ValueError as error:
                raise BadInputError(str(error)) from None
        path = resolve_ckpt_path(ckpt_path, self.default_root_dir)  # the CLI made `best`/`last` a file already
        if is_remote(output_dir) or (output_dir is None and is_remote(path)):  # its files go through local paths
            raise BadInputError(
                f"output_dir: export writes a local folder, and {output_dir or path} is in a store: give --output_dir a"
                " local folder (the checkpoint is read from the store)"
            )
        destination = Path(output_dir) if output_dir is not None else export_dir(Path(path))
        check_export_dir(destination, overwrite)
        model.load_state_dict(read_checkpoint(path)["state_dict"])
        inputs = example_batch(model, datamodule, max_samples)
        if quantize is not None:
            options = QuantizeOptions(
                quantize, quantize_device, max_accuracy_drop, max_output_error, latency_repeats, latency_threads
            )
            project = {type(part).__module__.partition(".")[0] for part in (model, datamodule) if part is not None}

            def then(floats: dict[str, Path]) -> None:
                report = export_quantized(model, inputs, floats, batches, options, project - {"torch"}, atol)
                print(format_quantization(report))

        exported = export_model(model, inputs, destination, formats, atol, then)
        print(format_report(exported))
        return exported

    def lr_find(
        self,
        model: pl.LightningModule,
        datamodule: pl.LightningDataModule | None = None,
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training: int = 100,
        mode: Literal["exponential", "linear"] = "exponential",
        early_stop_threshold: float | None = 4.0,
        lr_key: str | None = None,
        output: str | None = None,
        overwrite: bool = False,
        width: int = 60,
        height: int = 12,
    ) -> Found:
        """Runs Lightning's LR range test on the configured run and writes the suggested LR as a preset.

        Prints the loss against the LR (the suggestion marked ``o``) and the suggestion; writes
        ``<run directory>/lr_find.yaml`` (stack it: ``fit -c <configs> -c <that file>``) and, with matplotlib
        installed, the plot next to it (``lr_find.png``). Nothing is trained: the model is restored after the test.

        Args:
            model: The model, with its optimizer, from the config.
            datamodule: The data the test trains on.
            min_lr: LR of the first step.
            max_lr: LR of the last step.
            num_training: Optimizer steps of the test, whatever the configured run's length.
            mode: How the LR grows from step to step.
            early_stop_threshold: Stop once the smoothed loss exceeds this multiple of its best; ``null``: never.
            lr_key: Config key the preset sets; ``null``: the one key under ``model`` named ``lr`` or
                ``learning_rate`` (e.g. ``model.init_args.optimizer.init_args.lr``).
            output: Path of the preset; ``null``: ``<run directory>/lr_find.yaml``.
            overwrite: Replace the preset (and its plot) if it exists; without it the command stops and keeps them.
            width: Columns of the plot.
            height: Rows of the plot.
        """
        return lr_find(
            self,
            model,
            datamodule,
            min_lr=min_lr,
            max_lr=max_lr,
            num_training=num_training,
            mode=mode,
            early_stop_threshold=early_stop_threshold,
            lr_key=lr_key,
            output=output,
            overwrite=overwrite,
            width=width,
            height=height,
        )

    def batch_size_find(
        self,
        model: pl.LightningModule,
        datamodule: pl.LightningDataModule | None = None,
        mode: Literal["power", "binsearch"] = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        max_val: int = 8192,
        margin: float = 0.05,
        batch_size_key: str | None = None,
        output: str | None = None,
        overwrite: bool = False,
    ) -> Found:
        """Finds the largest batch size whose training steps fit in memory and writes it as a preset.

        Lightning's batch-size scaling of the datamodule's attribute; writes ``<run directory>/batch_size_find.yaml``.
        On a CPU no out-of-memory is detected: the result then only bounds the search, as the output says.

        Args:
            model: The model from the config.
            datamodule: The data, whose batch size attribute is scaled.
            mode: ``power`` doubles until a step fails; ``binsearch`` then bisects between the last two sizes.
            steps_per_trial: Training steps run at each batch size.
            init_val: First batch size tried.
            max_trials: Most batch sizes tried.
            max_val: Largest batch size tried.
            margin: ``binsearch`` only: the result is lowered by this fraction, as a safety buffer.
            batch_size_key: Config key the preset sets; ``null``: the one key under ``data`` named ``batch_size``
                (e.g. ``data.init_args.batch_size``); the datamodule attribute of that name is scaled.
            output: Path of the preset; ``null``: ``<run directory>/batch_size_find.yaml``.
            overwrite: Replace the preset if it exists; without it the command stops and keeps it.
        """
        return batch_size_find(
            self,
            model,
            datamodule,
            mode=mode,
            steps_per_trial=steps_per_trial,
            init_val=init_val,
            max_trials=max_trials,
            max_val=max_val,
            margin=margin,
            batch_size_key=batch_size_key,
            output=output,
            overwrite=overwrite,
        )
