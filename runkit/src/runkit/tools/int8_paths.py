"""The paths to an int8 file that runs fast where it is served (``export --quantize int8``), one function each, and
the float program compiled ahead of time that they are measured against.

On a CPU (x86: int8 dot products with AVX-512 VNNI, AMX-INT8 where there is one):

- ``onnx_dynamic``: ONNX Runtime's dynamic quantizer on MatMul/Gemm only (int8 weights, activations scaled per
  call); its ``ConvInteger`` is slower than the float convolution, so convolutions stay float;
- ``onnx_static``: ONNX Runtime's static quantizer (QDQ, int8 weights per channel, activation scales calibrated on
  validation batches): every Conv and MatMul in int8, no per-call scaling;
- ``pt2e_aoti``: PT2E with torchao's ``X86InductorQuantizer`` (int8 weights, activations scaled per call), compiled
  ahead of time by AOTInductor with freezing, which fuses each dequantize-linear into oneDNN's int8 kernels.

On a CUDA GPU, ``torchao_aoti``: torchao's int8 dynamic config compiled by AOTInductor. A ``torch.export`` program
run as it loads executes torchao's steps one by one, unfused: slower than float (see docs/predict-export.md).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .model_inputs import ModelInputs, traceable

# AOTInductor writes -g1 line tables into the package's library by default: a tenth of the file, never read when
# serving (a debugger's). Off, for the float and the int8 package alike.
AOTI_OPTIONS = {"aot_inductor.enable_line_tables": False}


@dataclass(frozen=True)
class Source:
    """What every path starts from."""

    model: nn.Module
    """The float model, on the target device, in eval mode."""
    inputs: ModelInputs
    """Inputs to trace with, on the target device."""
    float_onnx: Path | None
    """The checked float ONNX file (``None``: not exported)."""
    calibration: Sequence[ModelInputs]
    """Validation batches that set the activations' scales of the static paths."""


def compile_aoti(model: nn.Module, inputs: ModelInputs, path: Path, freezing: bool = False) -> None:
    """``model`` exported with a dynamic batch and compiled by AOTInductor into the package ``path``, for the device
    ``inputs`` are on. ``freezing``: weights become constants the compiler folds and prepacks (the int8 fusions)."""
    import torch._inductor.config as inductor_config
    from torch._inductor import aoti_compile_and_package

    traced, dynamic_shapes = traceable(model, inputs)
    with torch.no_grad():
        program = torch.export.export(traced, inputs.tensors, dynamic_shapes=dynamic_shapes, strict=False)
        with inductor_config.patch({**AOTI_OPTIONS, "freezing": freezing}):
            aoti_compile_and_package(program, package_path=str(path))


def pt2e_aoti(source: Source, path: Path) -> None:
    """PT2E int8 (``X86InductorQuantizer``: int8 weights per channel, uint8 activations per tensor scaled per call),
    compiled by AOTInductor into ``path``."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    # Activations scaled per call (is_dynamic): torch 2.13's AOTInductor compiles the static-activation graph wrong at
    # a dynamic batch (max |diff| 0.91 against 0.014 uncompiled, docs/predict-export.md); this one right (0.015).
    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config(is_dynamic=True))
    model, inputs = source.model, source.inputs
    module, dynamic_shapes = traceable(model, inputs)
    with torch.no_grad():  # traced for inference: the graph Inductor's int8 patterns match
        traced = torch.export.export(module, inputs.tensors, dynamic_shapes=dynamic_shapes, strict=False).module()
        prepared = prepare_pt2e(traced, quantizer)
        for batch in source.calibration:
            prepared(*batch.to(inputs.tensors[0].device).tensors)
        converted = convert_pt2e(prepared)
    positional = ModelInputs(inputs.names, inputs.tensors)  # the converted graph takes them positionally
    compile_aoti(converted, positional, path, freezing=True)


def float_aoti(source: Source, path: Path) -> None:
    """The float model compiled by AOTInductor into ``path``: the float candidate int8 files are measured against."""
    compile_aoti(source.model, source.inputs, path)


def torchao_aoti(source: Source, path: Path) -> None:
    """torchao's int8 dynamic config (Linear; Conv2d weight-only, ``quantize.py``) on the GPU, compiled by
    AOTInductor into ``path``."""
    from .quantize import quantize_model

    compile_aoti(quantize_model(source.model, "int8_dynamic").module, source.inputs, path)


def onnx_dynamic(source: Source, path: Path) -> None:
    """ONNX Runtime's dynamic int8 of the MatMul and Gemm nodes (Linear layers and attention's products)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(source.float_onnx, path, op_types_to_quantize=["MatMul", "Gemm"], weight_type=QuantType.QInt8)


def onnx_static(source: Source, path: Path) -> None:
    """ONNX Runtime's static int8 in QDQ form: weights per channel, activation scales from ``calibration``
    (min-max); ONNX Runtime fuses each QDQ pair into its int8 kernels when the session loads."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Batches(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(
                {name: tensor.numpy() for name, tensor in zip(batch.names, batch.tensors, strict=True)}
                for batch in source.calibration
            )

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as folder:
        prepared = Path(folder, "prepared.onnx")  # shapes inferred and constants folded, as ONNX Runtime advises
        quant_pre_process(str(source.float_onnx), str(prepared), skip_symbolic_shape=False)
        quantize_static(
            prepared,
            path,
            Batches(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
