"""What a model's ``forward`` takes, as export sees it: one or several tensors, batch first, named.

Lightning's ``example_input_array`` is a tensor (``forward(x)``), a tuple (``forward(*x)``) or a dict
(``forward(**x)``: Hugging Face's ``input_ids`` and ``attention_mask``). An exported program takes its tensors
positionally, in the order of ``names`` (an ONNX model by those names); ``Positional`` is the model seen that way.
Floating-point inputs are traced in float32; integer ones (token ids, masks) keep their dtype.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

LABEL_KEYS = ("labels", "label")  # a dict batch's targets (Hugging Face's name), never an input


@dataclass(frozen=True)
class ModelInputs:
    """The tensors of one call of ``forward``, each ``(B, ...)``, with their names."""

    names: tuple[str, ...]
    tensors: tuple[Tensor, ...]
    keywords: bool = False
    """``forward`` takes them by name (a dict example), else positionally."""

    def __len__(self) -> int:
        return len(self.tensors[0])

    def rows(self, index: Tensor | slice) -> ModelInputs:
        """The same inputs for the samples ``index`` selects."""
        return ModelInputs(self.names, tuple(tensor[index] for tensor in self.tensors), self.keywords)

    def to(self, device: str | torch.device) -> ModelInputs:
        return ModelInputs(self.names, tuple(tensor.to(device) for tensor in self.tensors), self.keywords)

    def call(self, model: nn.Module) -> Tensor:
        """``model`` on these inputs, as its ``forward`` takes them."""
        if self.keywords:
            return model(**dict(zip(self.names, self.tensors, strict=True)))
        return model(*self.tensors)


def traced(tensor: Tensor) -> Tensor:
    """A tensor as export traces it: floats in float32, integers as they are, in storage of its own (a program
    saves its sample inputs' whole storage)."""
    return (tensor.float() if tensor.is_floating_point() else tensor).clone()


def from_example(example: object, model: nn.Module) -> ModelInputs:
    """``example_input_array`` (or a predict batch's inputs) as ``ModelInputs``.

    Raises:
        ValueError: It is none of a tensor, a tuple/list of tensors, a dict of tensors.
    """
    if isinstance(example, Tensor):
        return ModelInputs(("input",), (traced(example),))
    if isinstance(example, Mapping) and example and all(isinstance(value, Tensor) for value in example.values()):
        names = tuple(str(name) for name in example if name not in LABEL_KEYS)
        return ModelInputs(names, tuple(traced(example[name]) for name in names), keywords=True)
    if isinstance(example, (tuple, list)) and example and all(isinstance(value, Tensor) for value in example):
        parameters = [name for name in inspect.signature(model.forward).parameters if name not in ("args", "kwargs")]
        names = tuple(parameters[: len(example)]) if len(parameters) >= len(example) else ()
        names = names or tuple(f"input_{index}" for index in range(len(example)))
        return ModelInputs(names, tuple(traced(value) for value in example))
    kind = type(example).__name__
    raise ValueError(
        f"the model's inputs are a {kind}: export takes a tensor, a tuple of tensors or a dict of tensors"
        " (example_input_array or the predict batches)"
    )


def batch_inputs(batch: object, like: ModelInputs) -> tuple[ModelInputs, Tensor | None]:
    """A data batch split into the model's inputs (shaped like ``like``) and its targets (``None``: none): a tensor
    is the inputs; a tuple holds the inputs first, then the targets; a dict holds the inputs by name and its
    ``labels``."""
    if isinstance(batch, Tensor):
        return ModelInputs(like.names, (traced(batch),), like.keywords), None
    if isinstance(batch, Mapping):
        targets = next((batch[key] for key in LABEL_KEYS if key in batch), None)
        return ModelInputs(like.names, tuple(traced(batch[name]) for name in like.names), like.keywords), targets
    if isinstance(batch, Sequence):
        count = len(like.names)
        targets = batch[count] if len(batch) > count and isinstance(batch[count], Tensor) else None
        return ModelInputs(like.names, tuple(traced(value) for value in batch[:count]), like.keywords), targets
    raise ValueError(f"a batch is a {type(batch).__name__}: expected a tensor, a tuple or a dict of tensors")


class Positional(nn.Module):
    """``model`` taking its inputs positionally, in the order of ``inputs.names``: what is exported."""

    def __init__(self, model: nn.Module, inputs: ModelInputs) -> None:
        super().__init__()
        self.model = model
        self.names = inputs.names
        self.keywords = inputs.keywords

    def forward(self, *tensors: Tensor) -> Tensor:
        return ModelInputs(self.names, tensors, self.keywords).call(self.model)


def traceable(model: nn.Module, inputs: ModelInputs) -> tuple[nn.Module, object]:
    """What torch.export traces, and its ``dynamic_shapes`` (dimension 0 of every input is the one batch size): the
    model itself for one positional tensor (its parameter names stay as in the checkpoint), else the model behind
    ``Positional`` (whose ``*tensors`` is one argument to torch.export)."""
    batch = torch.export.Dim("batch")
    if len(inputs.names) == 1 and not inputs.keywords:
        return model, ({0: batch},)
    wrapped = Positional(model, inputs).train(model.training)  # in eval mode when the model is
    return wrapped, {"tensors": tuple({0: batch} for _ in inputs.names)}
