"""What the kit reads from your task: a few optional attributes, each used only where it exists.

DataModule:
    ``input_shape`` (tuple of ints): the shape of one input sample, without the batch dimension; the kit builds
        the example input below from it. (The project's ``cli.py`` links it, and ``num_classes``, into the model.)
    ``num_classes`` (int): the number of classes.
    ``batch_size`` (int): samples per batch; the example input's batch size (1 without it).

LightningModule:
    ``example_input_array`` (Lightning's own attribute): one input batch. The model summary (output
        shapes), the memory budget (activations) and ``export`` (tracing) use it; without it, zeros of
        shape ``(batch_size, *input_shape)``.

A link (``LINKS`` in the project's ``cli.py``) whose attribute or argument is missing is skipped, and kept out
of the checkpoint: a model without ``num_classes`` simply does not get one. Without any example input the summary has no
shapes and the memory budget no activation row.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor


def example_input(trainer: pl.Trainer) -> Tensor | None:
    """The input of one measured forward outside the training loop, in the dtype the precision gives real batches.

    The module's ``example_input_array`` if it is a tensor, else a zero batch of the datamodule's
    ``input_shape``; ``None`` without either, for a module without ``forward``, or for a model sharded across
    processes (FSDP, DeepSpeed), which cannot run outside its wrapper.
    """
    if not isinstance(trainer.strategy, (SingleDeviceStrategy, DDPStrategy)):
        return None
    if not is_overridden("forward", trainer.lightning_module, pl.LightningModule):
        return None  # a module may train through its steps alone: nothing to run outside them
    defined = trainer.lightning_module.example_input_array
    if defined is not None:
        return defined if isinstance(defined, Tensor) else None
    shape = getattr(trainer.datamodule, "input_shape", None)
    if shape is None:
        return None
    batch = int(getattr(trainer.datamodule, "batch_size", 1))
    return trainer.precision_plugin.convert_input(torch.zeros((batch, *shape)))
