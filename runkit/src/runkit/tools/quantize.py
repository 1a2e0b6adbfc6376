"""Quantization of a trained model with torchao, layer by layer: what each mode does, where it can run, and which
layers it leaves float.

A mode is named as torchao names its config. Linear layers get that config; Conv2d layers, which torchao's int8
configs for Linear do not take, get torchao's int8 weight-only config for convolutions (``IntxWeightOnlyConfig``,
one scale per output channel and kernel position). Every other layer with weights (norms, embeddings, attention
that reads its own weights) stays float, and so does a layer torchao refuses or leaves as it was (float8 skips
shapes that are not multiples of 16): ``Quantized.kept_float`` names each with the reason.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass, field

import torch
from torch import nn

MODES = ("int8_weight_only", "int8_dynamic", "float8")
CONFIGS = {  # mode -> torchao's config for Linear layers
    "int8_weight_only": "Int8WeightOnlyConfig",
    "int8_dynamic": "Int8DynamicActivationInt8WeightConfig",
    "float8": "Float8DynamicActivationFloat8WeightConfig",
}
CONV_CONFIG = "IntxWeightOnlyConfig"  # int8 weights, per output channel: the int8 modes' Conv2d layers
FLOAT8_CAPABILITY = (8, 9)  # float8 matmuls: Ada Lovelace, Hopper and later


@dataclass(frozen=True)
class Quantized:
    """A quantized copy of a model and what happened to each of its layers with weights."""

    module: nn.Module
    layers: dict[str, str]
    """Quantized layer -> torchao's config applied to it."""
    kept_float: dict[str, str] = field(default_factory=dict)
    """Layer left float -> why."""


def check_quantization(mode: str, device: str) -> None:
    """Raises ``ValueError`` in one line where ``mode`` cannot run on ``device`` with this torch, before anything is
    written: torchao missing or not importable with this torch, no CUDA device, a GPU too old for float8. (``int8``
    is measured among several paths, see ``quantized_export.py``; its PT2E path is torchao's too.)"""
    if mode not in ("int8", *MODES):
        raise ValueError(f"quantize: {mode!r} unknown: choose from {['int8', *MODES]}")
    if importlib.util.find_spec("torchao") is None:
        raise ValueError(
            f"quantize: {mode} needs torchao, which is not installed: install the project's `export` extra"
            " (pip install -e '.[export]')"
        )
    try:
        import torchao.quantization  # noqa: F401  (a torchao built for another torch fails here)
    except Exception as error:  # whatever the import raises (a torchao built for another torch), the line says it
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"quantize: torchao cannot be imported with torch {torch.__version__}: {first}") from None
    if mode == "float8" and device != "cuda":
        raise ValueError("quantize: float8 runs on a CUDA GPU only: pass --quantize_device cuda on a machine with one")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"quantize: {mode} on cuda needs a CUDA GPU, and torch {torch.__version__} sees none")
        capability = torch.cuda.get_device_capability()
        if mode == "float8" and capability < FLOAT8_CAPABILITY:
            need, have = ".".join(map(str, FLOAT8_CAPABILITY)), ".".join(map(str, capability))
            raise ValueError(
                f"quantize: float8 needs a GPU of compute capability >= {need}; {torch.cuda.get_device_name()} has"
                f" {have}: use int8_dynamic or int8_weight_only"
            )


def quantize_model(model: nn.Module, mode: str) -> Quantized:
    """A copy of ``model`` in eval mode with each Linear (and, for the int8 modes, Conv2d) layer quantized by
    torchao's config for ``mode``, one layer at a time, so that a layer torchao refuses stays float alone."""
    from torchao.quantization import quantize_

    quantized = copy.deepcopy(model).eval()
    layers, kept_float = {}, {}
    inside_attention = {
        f"{name}.{child}" if name else child
        for name, module in quantized.named_modules()
        if isinstance(module, nn.MultiheadAttention)
        for child, _ in module.named_modules()
        if child
    }
    for name, module in quantized.named_modules():
        if next(module.parameters(recurse=False), None) is None:
            continue
        label, kind = name or type(module).__name__, type(module).__name__
        own = ", ".join(parameter for parameter, _ in module.named_parameters(recurse=False))
        if name in inside_attention or isinstance(module, nn.MultiheadAttention):
            kept_float[label] = f"{kind} ({own}) in nn.MultiheadAttention, which reads its weights directly"
            continue
        config_name = _config_name(module, mode)
        if config_name is None:
            layers_taken = "Linear and Conv2d layers" if mode != "float8" else "Linear layers"
            kept_float[label] = f"{kind} ({own}): torchao's {mode} quantizes {layers_taken} only"
            continue
        config = _config(config_name)
        try:
            quantize_(module, config, filter_fn=lambda candidate, _fqn, target=module: candidate is target)
        except Exception as error:  # torchao refuses a shape by an assert, a reshape, ...
            kept_float[label] = f"{kind} weight {tuple(module.weight.shape)}: torchao refused it ({_line(error)})"
            continue
        if type(module.weight) in (nn.Parameter, torch.Tensor):
            kept_float[label] = f"{kind} weight {tuple(module.weight.shape)}: torchao's {config_name} skips this shape"
        else:
            layers[label] = config_name
    return Quantized(quantized, layers, kept_float)


def _config_name(module: nn.Module, mode: str) -> str | None:
    if isinstance(module, nn.Linear):
        return CONFIGS[mode]
    if isinstance(module, nn.Conv2d) and mode != "float8" and module.padding_mode == "zeros":
        return CONV_CONFIG
    return None


def _config(name: str) -> object:
    """torchao's config of that name with its defaults; per-channel int8 weights for convolutions."""
    import torchao.quantization as ao

    if name == CONV_CONFIG:
        from torchao.quantization.granularity import PerAxis

        return ao.IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    return getattr(ao, name)()  # float8: one scale per tensor, which float32 weights take (per row needs bf16)


def _line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def tensor_bytes(tensors: dict[str, torch.Tensor]) -> int:
    """Bytes the tensors hold, counting a quantized tensor by the plain tensors inside it (int8 data, scales)."""
    return sum(_bytes(tensor) for tensor in tensors.values())


def _bytes(tensor: torch.Tensor) -> int:
    if hasattr(tensor, "__tensor_flatten__") and type(tensor) not in (nn.Parameter, torch.Tensor):
        names, _ = tensor.__tensor_flatten__()
        return sum(_bytes(getattr(tensor, name)) for name in names)
    return tensor.numel() * tensor.element_size()
