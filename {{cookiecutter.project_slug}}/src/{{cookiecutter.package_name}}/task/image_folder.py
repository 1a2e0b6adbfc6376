"""The second data example: real image files on disk, one folder per class, decoded with Pillow.

    root/
      circle/  0001.png  0002.jpg  ...
      square/  0001.png  ...

Ordinary code, as a team writes it on day one: a map-style ``Dataset`` that opens one file per sample, random
flips and crops drawn from torch's global RNG, ``DataLoader(shuffle=True)`` with worker processes. Nothing
here knows about exact resume; the kit adds it (``runkit.safety.resumable_data``).
"""

from __future__ import annotations

import random
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from runkit import InvalidDataError
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
"""File endings read as images (any case); other files in the class folders are ignored."""

Sample = tuple[Path, int]  # an image file and its class index


def find_images(root: Path) -> tuple[list[str], list[Sample]]:
    """The class names (the folder names, sorted) and every image below each class folder with its class index.

    Raises:
        ValueError: ``root`` is missing or holds no class folder, or a class folder holds no image.
    """
    if not root.is_dir():
        raise ValueError(f"root {root}: no such folder")
    classes = sorted(path.name for path in root.iterdir() if path.is_dir() and not path.name.startswith("."))
    if len(classes) < 2:
        raise ValueError(f"root {root}: expected a folder per class (at least 2), found {classes or 'none'}")
    samples: list[Sample] = []
    for label, name in enumerate(classes):
        files = sorted(path for path in (root / name).rglob("*") if path.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ValueError(f"class folder {root / name} holds no images ({' '.join(IMAGE_SUFFIXES)})")
        samples += [(path, label) for path in files]
    return classes, samples


def load_image(path: Path, size: int, channels: int) -> Tensor:
    """The image at ``path`` resized to ``size`` x ``size``, as float32 ``(channels, size, size)`` in ``[-1, 1]``.

    Raises:
        InvalidDataError: the file cannot be decoded (truncated, corrupt, not an image); the message names it.
    """
    try:
        with Image.open(path) as image:
            image = image.convert("L" if channels == 1 else "RGB").resize((size, size), Image.Resampling.BILINEAR)
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise InvalidDataError(f"image {path} cannot be decoded: {error}") from error
    pixels = torch.from_numpy(np.array(image, dtype=np.float32))  # (H, W) or (H, W, C), 0..255
    pixels = pixels[None] if channels == 1 else pixels.permute(2, 0, 1)  # (C, H, W)
    return pixels / 127.5 - 1.0


class ImageFiles(Dataset[tuple[Tensor, Tensor]]):
    """Image files and their labels; for training, a random horizontal flip and a random shifted crop."""

    def __init__(self, samples: list[Sample], image_size: int, channels: int, flip: bool, crop_padding: int) -> None:
        self.samples, self.image_size, self.channels = samples, image_size, channels
        self.flip, self.crop_padding = flip, crop_padding

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        path, label = self.samples[index]
        image = load_image(path, self.image_size, self.channels)  # (C, H, W)
        if self.flip and torch.rand(()) < 0.5:  # torch's global RNG, as in any ordinary augmentation
            image = image.flip(-1)
        if self.crop_padding:
            pad = self.crop_padding
            padded = F.pad(image[None], (pad, pad, pad, pad), mode="reflect")[0]  # (C, H + 2p, W + 2p)
            top, left = torch.randint(0, 2 * pad + 1, (2,)).tolist()
            image = padded[:, top : top + self.image_size, left : left + self.image_size]
        return image, torch.as_tensor(label)


class ImageFolderDataModule(pl.LightningDataModule):
    """Class-per-folder images (PNG, JPEG, ...) under ``root``, split per class into training and validation.

    ``num_classes`` (the number of class folders) and ``input_shape`` are linked by the CLI into the model.
    Validation, test and predict all use the held-out images, unaugmented.
    """

    def __init__(
        self,
        root: str,
        image_size: int = 32,
        channels: int = 3,
        val_fraction: float = 0.2,
        flip: bool = True,
        crop_padding: int = 2,
        batch_size: int = 32,
        num_workers: int = 2,
        seed: int = 0,
    ) -> None:
        """Finds the images (the files are read while training).

        Args:
            root: Folder with one subfolder of images per class; the sorted folder names are the classes.
            image_size: Height and width every image is resized to.
            channels: 3 for RGB, 1 for grayscale (images are converted as they are read).
            val_fraction: Share of each class's images held out for validation (chosen by ``seed``).
            flip: Flip training images horizontally at random (leave off for images whose mirror is another class).
            crop_padding: Largest random shift of training images, in pixels (reflect-padded, then cropped back).
            batch_size: Images per batch, per process.
            num_workers: DataLoader worker processes decoding images.
            seed: Seed of the training/validation split.
        """
        super().__init__()
        if image_size < 4:
            raise ValueError(f"image_size must be >= 4, got {image_size}")
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {channels}")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if not 0 <= crop_padding < image_size:
            raise ValueError(f"crop_padding must be in [0, image_size), got {crop_padding}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.root = Path(root)
        # Found here, not in `setup`: the CLI links `num_classes` into the model when both are built.
        self.classes, samples = find_images(self.root)
        self.image_size, self.channels, self.flip, self.crop_padding = image_size, channels, flip, crop_padding
        self.batch_size, self.num_workers = batch_size, num_workers
        self.splits = split_per_class(samples, val_fraction, seed)
        if len(self.splits["train"]) < batch_size:
            raise ValueError(
                f"root {root}: {len(self.splits['train'])} training images, fewer than batch_size={batch_size}"
            )

    @property
    def num_classes(self) -> int:
        """Number of class folders: linked into the model by the CLI."""
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image: linked into the network by the CLI."""
        return (self.channels, self.image_size, self.image_size)

    def train_dataloader(self) -> DataLoader:
        dataset = ImageFiles(self.splits["train"], self.image_size, self.channels, self.flip, self.crop_padding)
        # drop_last keeps every training batch the same shape (BatchNorm never sees a batch of one).
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        dataset = ImageFiles(self.splits["val"], self.image_size, self.channels, flip=False, crop_padding=0)
        return DataLoader(dataset, batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()


def split_per_class(samples: list[Sample], val_fraction: float, seed: int) -> dict[str, list[Sample]]:
    """``{"train": ..., "val": ...}``: ``val_fraction`` of each class's images (at least one), chosen by ``seed``."""
    by_class: dict[int, list[Sample]] = {}
    for sample in samples:
        by_class.setdefault(sample[1], []).append(sample)
    splits: dict[str, list[Sample]] = {"train": [], "val": []}
    shuffler = random.Random(seed)  # its own RNG: the split never depends on the training seed
    for _, files in sorted(by_class.items()):
        shuffler.shuffle(files)
        held_out = max(1, round(len(files) * val_fraction)) if len(files) > 1 else 0
        splits["val"] += files[:held_out]
        splits["train"] += files[held_out:]
    return splits
