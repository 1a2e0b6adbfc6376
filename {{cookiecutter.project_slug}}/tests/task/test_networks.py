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


def accumulated_and_whole_gradients(net: torch.nn.Module, micro_batches: int = 4) -> tuple[list, list]:
    """Gradients of the mean loss over 32 samples: summed over micro-batches of 8 (as accumulation does), and whole."""
    images, labels = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    grads = []
    for chunks in (micro_batches, 1):
        net.zero_grad()
        for x, y in zip(images.chunk(chunks), labels.chunk(chunks), strict=True):
            (torch.nn.functional.cross_entropy(net(x), y) / chunks).backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    return grads[0], grads[1]


@pytest.mark.parametrize(("name", "extra"), [("TransformerClassifier", {}), ("ConvNet", {"norm": "group"})])
def test_accumulated_micro_batches_give_the_gradient_of_one_large_batch(
    networks: ModuleType, name: str, extra: dict
) -> None:
    # What configs/training/accumulate.yaml relies on: exact for networks without batch statistics.
    torch.manual_seed(0)
    accumulated, whole = accumulated_and_whole_gradients(getattr(networks, name)(dropout=0.0, **extra))
    for micro, large in zip(accumulated, whole, strict=True):
        torch.testing.assert_close(micro, large, rtol=1e-4, atol=1e-6)


def test_batchnorm_breaks_the_equivalence(networks: ModuleType) -> None:
    torch.manual_seed(0)
    accumulated, whole = accumulated_and_whole_gradients(networks.ConvNet(dropout=0.0))  # norm: batch
    assert max(float((a - b).abs().max()) for a, b in zip(accumulated, whole, strict=True)) > 1e-3
