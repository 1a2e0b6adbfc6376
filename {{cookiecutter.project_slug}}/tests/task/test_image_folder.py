"""The image-folder example: class folders of PNG and JPEG files, bad folders named, and its preset trained.

A small folder is written per module: 3 classes x 20 images of 16 x 16 pixels, every other one a JPEG. With
``val_fraction`` 0.2 and batches of 8: 48 training images, 6 batches per epoch, 2 epochs, 12 optimizer steps.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from runkit.testing.support import last_checkpoint, refused, run_dir_flags
from support import CONFIGS, submodule

SETUP = [
    f"--config={CONFIGS / 'example/image_folder.yaml'}",
    "--data.init_args.image_size=16",
    "--data.init_args.batch_size=8",
    "--trainer.max_epochs=2",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
]


@pytest.fixture(scope="module")
def image_folder() -> ModuleType:
    return submodule("task.image_folder")


@pytest.fixture(scope="module")
def root(image_root: Path) -> Path:
    return image_root


def fit(cli: ModuleType, run: Path, root: Path, *args: str) -> Any:
    return cli.build_cli(["fit", *SETUP, f"--data.init_args.root={root}", *run_dir_flags(run), *args])


@pytest.fixture(scope="module")
def straight(cli: ModuleType, root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """The run that is never interrupted, without workers: the built objects and its last checkpoint."""
    run = tmp_path_factory.mktemp("straight") / "runs" / "image_folder" / "straight"
    built = fit(cli, run, root, "--data.init_args.num_workers=0")
    return built, last_checkpoint(run)


def test_finds_the_classes_splits_them_and_decodes_png_and_jpeg(image_folder: ModuleType, root: Path) -> None:
    data = image_folder.ImageFolderDataModule(str(root), image_size=12, batch_size=8, num_workers=0)
    assert data.classes == ["class_0", "class_1", "class_2"]
    assert (data.num_classes, data.input_shape) == (3, (3, 12, 12))
    assert (len(data.splits["train"]), len(data.splits["val"])) == (48, 12)
    assert {path.suffix for path, _ in data.splits["train"]} == {".png", ".jpg"}
    images, labels = next(iter(data.val_dataloader()))
    assert images.shape == (8, 3, 12, 12)
    assert images.dtype == torch.float32
    assert -1.0 <= float(images.min()) < float(images.max()) <= 1.0
    assert set(labels.tolist()) <= {0, 1, 2}
    gray = image_folder.ImageFolderDataModule(str(root), channels=1, batch_size=8, num_workers=0)
    assert next(iter(gray.train_dataloader()))[0].shape == (8, 1, 32, 32)


def test_training_images_are_flipped_and_shifted_at_random(image_folder: ModuleType, root: Path) -> None:
    train = image_folder.ImageFolderDataModule(str(root), num_workers=0, batch_size=8).train_dataloader().dataset
    reads = [train[0][0] for _ in range(8)]
    assert any(not torch.equal(reads[0], read) for read in reads[1:])
    val = image_folder.ImageFolderDataModule(str(root), num_workers=0, batch_size=8).val_dataloader().dataset
    assert torch.equal(val[0][0], val[0][0])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: None, "root {root}: no such folder"),
        (lambda root: root.mkdir(), "root {root}: expected a folder per class"),
        (
            lambda root: [(root / name).mkdir(parents=True) for name in ("a", "b")],
            "class folder {root}/a holds no images",
        ),
    ],
    ids=["missing", "no-class-folders", "class-without-images"],
)
def test_a_bad_folder_is_named(image_folder: ModuleType, tmp_path: Path, make: Any, message: str) -> None:
    root = tmp_path / "root"
    make(root)
    with pytest.raises(ValueError, match=message.format(root=root)):
        image_folder.ImageFolderDataModule(str(root))


def test_a_corrupt_image_is_named_by_its_path(image_folder: ModuleType, write_images: Any, tmp_path: Path) -> None:
    root = write_images(tmp_path / "root", per_class=10)
    broken = root / "class_1" / "004.png"
    broken.write_bytes(broken.read_bytes()[:60])  # a copy that stopped
    data = image_folder.ImageFolderDataModule(str(root), batch_size=4, num_workers=0, val_fraction=0.1)
    dataset = data.train_dataloader().dataset
    (index,) = [i for i, (path, _) in enumerate(dataset.samples) if path == broken]
    with pytest.raises(ValueError, match=f"image {broken} cannot be decoded"):
        dataset[index]


def test_a_corrupt_image_read_by_a_loader_worker_is_named_on_the_first_line(
    image_folder: ModuleType, write_images: Any, tmp_path: Path
) -> None:
    root = write_images(tmp_path / "root", per_class=4)
    broken = root / "class_1" / "002.png"
    broken.write_bytes(broken.read_bytes()[:60])
    data = image_folder.ImageFolderDataModule(str(root), batch_size=4, num_workers=1, val_fraction=0.25)
    loader = data.train_dataloader()
    loader.dataset.samples = [sample for sample in loader.dataset.samples if sample[0] == broken] * 4
    # torch re-raises a worker's error as "Caught InvalidDataError in DataLoader worker process 0." and a traceback:
    # the command's one `error:` line would not say which file.
    with pytest.raises(ValueError, match="cannot be decoded") as error:
        next(iter(loader))
    first = str(error.value).splitlines()[0]
    assert first.startswith(f"image {broken} cannot be decoded: "), first
    assert first.endswith("(in DataLoader worker process 0)"), first


def test_the_preset_alone_trains_on_the_folder_with_shape_and_classes_linked(
    straight: tuple[Any, dict[str, Any]],
) -> None:
    built, checkpoint = straight
    # The preset alone plus `root` (test_configs.py cannot run it: it has no folder to name): the saved config
    # round-trips, nulls written out as in config.yaml.
    dumped = built.parser.dump(built.config, skip_none=False)
    assert built.parser.dump(built.parser.parse_string(dumped), skip_none=False) == dumped
    assert built.model.hparams["num_classes"] == 3
    assert built.model.hparams["input_shape"] == (3, 16, 16)
    assert checkpoint["global_step"] == 12
    assert checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"epoch": 1, "batches": 6, "seed": 42}]


def test_the_preset_left_unfilled_names_the_missing_key(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = refused(capsys, lambda: cli.build_cli(SETUP[:1], run=False))
    assert "required: root" in error
    assert "ImageFolderDataModule" in error
