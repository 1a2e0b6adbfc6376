"""Networks: output shapes, argument checks, and activation checkpointing that changes nothing numerically."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import pytest
import torch


@pytest.mark.parametrize("name", ["ConvNet", "TransformerClassifier"])
@pytest.mark.parametrize(("channels", "size", "classes"), [(1, 28, 10), (3, 32, 4)])
def test_output_shape(networks: ModuleType, name: str, channels: int, size: int, classes: int) -> None:
    kwargs = {"patch_size": 4} if name == "TransformerClassifier" else {}
    net = getattr(networks, name)(num_classes=classes, input_shape=(channels, size, size), **kwargs)
    logits = net(torch.randn(5, channels, size, size))
    assert logits.shape == (5, classes)
    assert logits.dtype == torch.float32


def test_networks_do_not_import_lightning(networks: ModuleType) -> None:
    tree = ast.parse(Path(networks.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported
    assert not [name for name in imported if name.split(".")[0] in {"lightning", "pytorch_lightning"}]


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("ConvNet", {"input_shape": (1, 30, 30), "widths": (8, 8)}, "divisible by 2\\*\\*len\\(widths\\)=4"),
        ("ConvNet", {"widths": ()}, "at least one stage"),
        ("ConvNet", {"widths": (16, 0)}, "widths must be channel counts >= 1, got \\[16, 0\\]"),
        ("TransformerClassifier", {"dim": 0}, "patch_size, dim and heads must be >= 1, got 7, 0 and 4"),
        ("ConvNet", {"norm": "layer"}, "norm must be 'batch' or 'group'"),
        ("TransformerClassifier", {"patch_size": 5}, "patch_size=5 must divide the image size 28x28"),
        ("TransformerClassifier", {"dim": 30, "heads": 4}, "dim=30 must be divisible by heads=4"),
    ],
)
def test_bad_arguments_name_the_problem(networks: ModuleType, name: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        getattr(networks, name)(**kwargs)


@pytest.mark.parametrize("name", ["ConvNet", "TransformerClassifier"])
def test_activation_checkpointing_gives_identical_gradients(networks: ModuleType, name: str) -> None:
    extra = {"norm": "group"} if name == "ConvNet" else {}
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        net = getattr(networks, name)(dropout=0.0, activation_checkpointing=checkpointing, **extra)
        x = torch.randn(4, 1, 28, 28)
        net(x).square().mean().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    for plain, recomputed in zip(*grads, strict=True):
        torch.testing.assert_close(recomputed, plain, rtol=0, atol=0)
