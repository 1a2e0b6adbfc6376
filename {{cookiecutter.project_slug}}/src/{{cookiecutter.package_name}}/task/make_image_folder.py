"""Writes a folder of real image files to try `configs/example/image_folder.yaml` on: the gratings as PNG and JPEG.

    python -m <package>.task.make_image_folder data/gratings     # 10 orientations, 500 colour images each
    <package> fit -c configs/example/image_folder.yaml --data.init_args.root data/gratings --data.init_args.flip false

One folder per orientation (``orientation_00`` ...), every other file a JPEG. The pixel noise is in the files,
as in any real data set. A mirror image is another orientation: train without flips.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from jsonargparse import CLI
from PIL import Image

from .gratings import render_gratings


def main(
    out: Path, per_class: int = 500, num_classes: int = 10, image_size: int = 32, noise: float = 0.9, seed: int = 0
) -> None:
    """Renders the images and writes them under ``out``.

    Args:
        out: The folder to write; one subfolder per class is created in it.
        per_class: Images per class.
        num_classes: Orientations, so class folders.
        image_size: Height and width of the images, in pixels.
        noise: Standard deviation of the Gaussian pixel noise; the grating's amplitude is <= 1.
        seed: Seed of the images and their noise.
    """
    images, labels = render_gratings(per_class * num_classes, num_classes, image_size, 3, seed)  # (N, 3, H, W)
    noisy = images.float() + noise * torch.randn(images.shape, generator=torch.Generator().manual_seed(seed + 1))
    pixels = (128 + 50 * noisy).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()  # (N, H, W, 3)
    for label in range(num_classes):
        (out / f"orientation_{label:02d}").mkdir(parents=True, exist_ok=True)
    for index, (image, label) in enumerate(zip(pixels, labels.tolist(), strict=True)):
        stem = out / f"orientation_{label:02d}" / f"{index:06d}"
        if index % 2:
            Image.fromarray(np.ascontiguousarray(image)).save(stem.with_suffix(".jpg"), quality=90)
        else:
            Image.fromarray(np.ascontiguousarray(image)).save(stem.with_suffix(".png"))
    print(f"{len(pixels)} images in {num_classes} class folders under {out}")


if __name__ == "__main__":
    CLI(main)
