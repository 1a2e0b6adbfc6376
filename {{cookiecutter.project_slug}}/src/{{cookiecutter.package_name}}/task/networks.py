"""Plain ``nn.Module`` networks: no Lightning, no devices, no training code.

Every network takes ``num_classes`` and ``input_shape`` first; the classifier builds them with the
numbers the CLI links from the datamodule, so they live in one place. Inputs are
``(B, C, H, W)`` float32 images, outputs ``(B, num_classes)`` logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


def _run(block: nn.Module, x: Tensor, activation_checkpointing: bool) -> Tensor:
    """Runs ``block``; with checkpointing on, its activations are recomputed in backward."""
    if activation_checkpointing and torch.is_grad_enabled():
        return checkpoint(block, x, use_reentrant=False)
    return block(x)


class ConvNet(nn.Module):
    """A small VGG-style ConvNet: ``[conv-norm-relu] x2 + maxpool`` per stage, then a linear head."""

    def __init__(
        self,
        num_classes: int = 10,
        input_shape: tuple[int, int, int] = (1, 28, 28),
        widths: Sequence[int] = (16, 32),
        norm: Literal["batch", "group"] = "batch",
        dropout: float = 0.1,
        activation_checkpointing: bool = False,
    ) -> None:
        """Builds the network.

        Args:
            num_classes: Number of output logits (linked from the datamodule).
            input_shape: ``(C, H, W)`` of one input image (linked from the datamodule).
            widths: Output channels of each stage; each stage halves the resolution.
            norm: ``batch`` (BatchNorm, sees per-device micro-batches) or ``group`` (GroupNorm,
                independent of batch size, so accumulation and small batches are exact).
            dropout: Dropout probability before the classifier head.
            activation_checkpointing: Recompute each stage's activations in backward to save memory.
        """
        super().__init__()
        if not widths:
            raise ValueError("ConvNet needs at least one stage in `widths`")
        if any(width < 1 for width in widths):  # a stage of 0 channels is built, then fails in its first forward
            raise ValueError(f"widths must be channel counts >= 1, got {list(widths)}")
        in_channels, height, width = input_shape
        if height % 2 ** len(widths) or width % 2 ** len(widths):
            raise ValueError(f"image size {height}x{width} must be divisible by 2**len(widths)={2 ** len(widths)}")
        self.activation_checkpointing = activation_checkpointing
        stages, channels = [], in_channels
        for width in widths:
            stages.append(
                nn.Sequential(
                    nn.Conv2d(channels, width, 3, padding=1, bias=False),
                    _norm(norm, width),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(width, width, 3, padding=1, bias=False),
                    _norm(norm, width),
                    nn.ReLU(inplace=True),
                    nn.MaxPool2d(2),
                )
            )
            channels = width
        self.stages = nn.ModuleList(stages)
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(dropout), nn.Linear(channels, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        for stage in self.stages:
            x = _run(stage, x, self.activation_checkpointing)  # (B, C_i, H / 2^i, W / 2^i)
        x = x.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1): global average pool
        return self.head(x)  # (B, num_classes)


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(8, channels), channels)
    raise ValueError(f"norm must be 'batch' or 'group', got {kind!r}")


class Attention(nn.Module):
    """Multi-head self-attention on ``F.scaled_dot_product_attention`` (fused kernels where available)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        batch, tokens, dim = x.shape  # (B, T, D)
        qkv = self.qkv(x).view(batch, tokens, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, heads, T, D / heads)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(x.transpose(1, 2).reshape(batch, tokens, dim))  # (B, T, D)


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, dropout: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, dim), nn.Dropout(dropout)
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))  # (B, T, D)


class TransformerClassifier(nn.Module):
    """A small vision transformer: patch embedding, pre-norm blocks, mean-pooled linear head.

    Only LayerNorm, no batch statistics: gradient accumulation is exactly equivalent to a larger batch.
    """

    def __init__(
        self,
        num_classes: int = 10,
        input_shape: tuple[int, int, int] = (1, 28, 28),
        patch_size: int = 7,
        dim: int = 64,
        depth: int = 3,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
        activation_checkpointing: bool = False,
    ) -> None:
        """Builds the network.

        Args:
            num_classes: Number of output logits (linked from the datamodule).
            input_shape: ``(C, H, W)`` of one input image (linked from the datamodule).
            patch_size: Side of the square patches that become tokens; must divide the image's height and width.
            dim: Token embedding width.
            depth: Number of transformer blocks.
            heads: Attention heads per block; must divide ``dim``.
            mlp_ratio: MLP hidden width as a multiple of ``dim``.
            dropout: Dropout in attention and MLP.
            activation_checkpointing: Recompute each block's activations in backward to save memory.
        """
        super().__init__()
        in_channels, height, width = input_shape
        if min(patch_size, dim, heads) < 1:  # built without complaint, then a traceback in the first forward
            raise ValueError(f"patch_size, dim and heads must be >= 1, got {patch_size}, {dim} and {heads}")
        if height % patch_size or width % patch_size:
            raise ValueError(f"patch_size={patch_size} must divide the image size {height}x{width}")
        self.activation_checkpointing = activation_checkpointing
        num_patches = (height // patch_size) * (width // patch_size)
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x)  # (B, D, H / P, W / P)
        x = x.flatten(2).transpose(1, 2) + self.pos_embed  # (B, T, D)
        for block in self.blocks:
            x = _run(block, x, self.activation_checkpointing)
        return self.head(self.norm(x).mean(dim=1))  # (B, num_classes)
