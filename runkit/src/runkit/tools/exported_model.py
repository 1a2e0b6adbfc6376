"""``predict --ckpt_path <export folder>``: the model runs what was exported, so that accuracy on real data and
throughput come from the file a team ships, through the command it uses.

The folder's file is the one ``quantization.json`` recommends, else ``model.pt2``, else ``model.onnx``. The
LightningModule keeps its own ``predict_step`` (and the data its loaders); only its ``forward`` becomes the exported
program, on the CPU. Its weights are the file's: no checkpoint is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
from torch import Tensor

from .model_inputs import from_example
from .program_checks import Program, load_program, runtime

REPORT = "quantization.json"
FLOAT_FILES = ("model.pt2", "model.onnx")


def is_export_folder(path: str | Path | None) -> bool:
    """Whether ``path`` is a folder that ``export`` wrote (a checkpoint is a file)."""
    if path is None or "://" in str(path) or not Path(path).is_dir():
        return False
    return any((Path(path) / name).is_file() for name in (REPORT, *FLOAT_FILES))


def exported_file(folder: str | Path) -> Path:
    """The file to run: ``quantization.json``'s recommendation, else the float ``model.pt2``, else ``model.onnx``.

    Raises:
        ValueError: The folder holds none of them, or the recommended file is gone (one line naming it).
    """
    folder = Path(folder)
    if (folder / REPORT).is_file():
        chosen = folder / json.loads((folder / REPORT).read_text())["recommended"]["file"]
        if not chosen.is_file():
            raise ValueError(f"ckpt_path: {folder}/{REPORT} recommends {chosen.name}, which is not in the folder")
        return chosen
    for name in FLOAT_FILES:
        if (folder / name).is_file():
            return folder / name
    raise ValueError(f"ckpt_path: {folder} holds no exported model ({', '.join(FLOAT_FILES)} or {REPORT})")


def use_export(model: pl.LightningModule, folder: str | Path, threads: int = 0) -> str:
    """Makes ``model.forward`` run the export's file; returns the line that says which file runs, and how.

    ``threads``: ONNX Runtime's threads (0: its default); torch's are the process's.
    """
    path = exported_file(folder)
    model.forward = ExportedForward(load_program(path, "cpu", threads), model)  # an instance's attribute wins
    which = "the file its quantization.json recommends" if (path.parent / REPORT).is_file() else "its float file"
    return f"predict: runs {path} ({runtime(path)}), {which}; no checkpoint is loaded"


class ExportedForward:
    """``forward(*args, **kwargs)`` of the model, computed by the exported program: inputs given by name (a dict
    ``example_input_array``) are put in the order the program takes them."""

    def __init__(self, program: Program, model: pl.LightningModule) -> None:
        self.program = program
        example = model.example_input_array
        self.names = from_example(example, model).names if isinstance(example, dict) else ()

    def __call__(self, *args: Tensor, **kwargs: Tensor) -> Tensor:
        tensors = (*args, *(kwargs[name] for name in self.names if name in kwargs))
        return self.program(*(tensor.cpu() for tensor in tensors))
