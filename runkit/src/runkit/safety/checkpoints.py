"""Where a run's checkpoints live, the best and the newest one, and checks before one is loaded.

``checkpoints/best.ckpt`` comes from ``BestCheckpoint`` (Lightning's ``ModelCheckpoint`` on the monitored
metric); ``checkpoints/last.ckpt`` from ``LastCheckpoint``. The file ``--ckpt_path best|last|<file>``
names (which run's: see ``run/folders.py``) is checked here before anything runs, so a bad checkpoint stops the
command with a clear message and leaves every file as it was.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..lightning_internals import logged_names
from ..store import RunPath, StorePath, location
from ..text import plain
from .boundaries import StepBoundary
from .compiled_keys import plain_key
from .digests import verify
from .finite import listed, nonfinite_in_checkpoint
from .monitor_mode import checked_mode, without_loader

if TYPE_CHECKING:
    from .checkpoint_io import AtomicCheckpointIO

LAST, BEST = "last", "best"


def checkpoint_dir(trainer: pl.Trainer) -> RunPath:
    """The run's ``checkpoints/`` folder: the one ``ModelCheckpoint`` uses, inside the run directory."""
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, ModelCheckpoint) and callback.dirpath:
            return location(callback.dirpath)
    return location(trainer.log_dir or trainer.default_root_dir) / "checkpoints"


class BestCheckpoint(ModelCheckpoint):
    """``checkpoints/best.ckpt``: the weights with the best value of the monitored metric so far.

    Lightning's ``ModelCheckpoint`` with the settings a run chooses; the file name is fixed, so ``--ckpt_path best``
    finds it. Without a ``monitor`` it follows the model's validation loss (``val/loss``, or the one validation
    metric named ``...loss``; with several validation loaders, the first one's) once the first validation has logged
    it; a model that logs none gets no best.ckpt, and one line says so. ``--best_checkpoint null`` switches it off.
    """

    def __init__(self, monitor: str | None = None, mode: Literal["min", "max"] | None = None) -> None:
        """Configures what "best" means.

        Args:
            monitor: The logged metric that ranks checkpoints (e.g. ``val/acc``); ``null``: the validation loss
                the model logs, if it logs one.
            mode: ``min`` if lower is better, ``max`` if higher is; ``null``: the monitor's name says it (``min`` for
                a loss or an error, ``max`` for an accuracy or a score: see ``monitor_mode.py``). Only for a name that
                says neither; one that says the opposite is refused.
        """
        if monitor == "":
            raise ValueError("monitor must name a logged metric (e.g. val/loss), or be null")
        super().__init__(
            monitor=monitor,
            mode=checked_mode(monitor, mode),
            filename=BEST,
            save_top_k=1,
            enable_version_counter=False,
        )
        self.follows_loss = monitor is None  # the monitor is chosen from what the first validation logs

    @property
    def state_key(self) -> str:
        # Fixed, so the state of a run whose monitor was chosen later is found again on resume.
        return type(self).__qualname__

    def choose_monitor(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Follows the validation loss the model logs, or switches off with one line (once, when nothing is chosen)."""
        if not self.follows_loss or self.monitor is not None:
            return
        logged = sorted(key for key in logged_names(trainer) if is_validation_name(key))
        # With several validation loaders (`.../dataloader_idx_N`), the first one's loss: the validation set.
        first = [key for key in logged if not re.search(r"/dataloader_idx_[1-9]\d*$", key)]
        losses = [key for key in first if without_loader(key).rsplit("/", 1)[-1].removeprefix("val_").endswith("loss")]
        chosen = next((key for key in ("val/loss", "val/loss/dataloader_idx_0") if key in logged), None)
        chosen = chosen or (losses[0] if len(losses) == 1 else None)
        if chosen is None:
            self.follows_loss, self.save_top_k = False, 0
            if trainer.limit_val_batches == 0:  # then nothing validates: the model may well log a loss when it does
                rank_zero_info(
                    f"best_checkpoint: validation is off (trainer.limit_val_batches: {trainer.limit_val_batches}), so"
                    " there is no validation loss to follow: no best.ckpt; name a training metric with"
                    " --best_checkpoint.monitor, or switch it off with --best_checkpoint null"
                )
                return
            rank_zero_info(
                f"best_checkpoint: {type(pl_module).__name__} logs no validation loss"
                f" ({', '.join(logged) or 'no validation metric'}): no best.ckpt; name one with"
                " --best_checkpoint.monitor, or switch it off with --best_checkpoint null"
            )
            return
        self.monitor = chosen
        self._set_mode("min")  # a loss
        rank_zero_info(f"best_checkpoint: follows {chosen} ({self.mode}); name another with --best_checkpoint.monitor")

    def _set_mode(self, mode: str) -> None:
        # What ModelCheckpoint's constructor does with `mode`, for a monitor chosen after it.
        self.mode, self.kth_value = mode, torch.full((), torch.inf if mode == "min" else -torch.inf)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.choose_monitor(trainer, pl_module)
        super().on_validation_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking is False and self.follows_loss and self.monitor is None:
            self.choose_monitor(trainer, pl_module)
        super().on_train_epoch_end(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "mode": self.mode, "follows_loss": self.follows_loss}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("monitor")
        if self.follows_loss and self.monitor is None and state_dict.get("follows_loss") and saved:
            self.monitor = saved  # chosen by the session that wrote the checkpoint
            self._set_mode("min")
        if saved != self.monitor:
            # The best score so far is another metric's (an accuracy, compared with a loss): the ranking starts over.
            if saved:
                rank_zero_info(
                    f"best_checkpoint: the checkpoint ranked by {saved}, this run by"
                    f" {self.monitor or 'the validation loss'}: the ranking starts over at the next validation"
                )
            self.best_model_path = state_dict.get("best_model_path", "")
            return
        super().load_state_dict(moved_with_the_run(state_dict, self.dirpath))
        self.current_score = state_dict.get("current_score")  # Lightning leaves it None until the next improvement


def moved_with_the_run(state_dict: dict[str, Any], dirpath: str | None) -> dict[str, Any]:
    """``ModelCheckpoint``'s state with the paths of a run folder that was moved or copied since (its checkpoints are
    always ``<run>/checkpoints/``): Lightning drops the best score of a state from another folder, and the copy's
    best.ckpt would be replaced by the next validation, better or not."""
    before = state_dict.get("dirpath")
    if not before or not dirpath or before == dirpath:
        return state_dict

    def moved(path: object) -> object:
        return str(location(dirpath) / Path(path).name) if isinstance(path, str) and path.startswith(before) else path

    state = {key: moved(value) for key, value in state_dict.items()}
    state["dirpath"] = dirpath
    state["best_k_models"] = {moved(key): value for key, value in state_dict.get("best_k_models", {}).items()}
    return state


def is_validation_name(name: str) -> bool:
    """Whether ``name`` reads as a validation metric: ``val/loss``, ``val_acc``, ``valid/...``, ``validation/...``."""
    return name.split("/")[0].split("_")[0] in {"val", "valid", "validation"}


class LastCheckpoint(StepBoundary, Checkpoint):
    """Keeps ``checkpoints/last.ckpt`` the newest training state: after every epoch and every N optimizer steps.

    Mid-epoch saves happen only at optimizer-step boundaries (see ``boundaries.py``). By default a save costs the
    loop only a copy of the state into host memory and is written in the background (``background_save.py``); a
    background save that failed stops the fit at the next step, and the fit's end waits for the last one.

    ``ModelCheckpoint`` cannot do both (``every_n_train_steps`` and ``every_n_epochs`` exclude each other),
    and its ``save_last=True`` rewrites ``last.ckpt`` only when the monitored metric improved (lightning 2.6).
    """

    def __init__(self, every_n_train_steps: int | None = None, background: bool = True) -> None:
        """Configures when and how ``last.ckpt`` is rewritten.

        Args:
            every_n_train_steps: Also save every this many optimizer steps (mid-epoch); ``null``: only at the
                end of each epoch (and on preemption, see ``Preemption``).
            background: Write ``last.ckpt`` in a thread while training goes on (the loop waits only for a copy of
                the state in host memory); ``false``: the loop waits until the file is written.
        """
        if every_n_train_steps is not None and every_n_train_steps < 1:
            raise ValueError(f"every_n_train_steps must be >= 1 or null, got {every_n_train_steps}")
        self.every_n_train_steps, self.background = every_n_train_steps, background
        self.path: RunPath | None = None
        self._writer: AtomicCheckpointIO | None = None  # the kit's checkpoint writer, where it writes the checkpoints

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        from .checkpoint_io import AtomicCheckpointIO  # it imports nonfinite.py, which imports this module

        self.path = location(trainer.strategy.broadcast(str(checkpoint_dir(trainer) / f"{LAST}.ckpt")))
        writer = trainer.strategy.checkpoint_io
        self._writer = writer if isinstance(writer, AtomicCheckpointIO) else None
        if self.background and self._writer is None and stage == TrainerFn.FITTING:
            rank_zero_info(
                f"last_checkpoint: saved in the loop: the checkpoint plugin is {type(writer).__name__}, and only"
                " runkit's writes in the background"
            )

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: object, batch_idx: int
    ) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        if self._writer is not None:
            self._writer.saves.raise_failure()  # a background save failed: stop here (what it replaced is intact)

    def on_optimizer_step_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0:
            self.save(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._writer is not None:
            self._writer.saves.wait()  # the fit ends with its last state committed
            self._writer.saves.raise_failure()

    def save(self, trainer: pl.Trainer) -> None:
        """Writes the current training state to ``last.ckpt`` (all processes call it; rank 0 writes)."""
        if trainer.sanity_checking or trainer.fast_dev_run or trainer.state.fn != TrainerFn.FITTING:
            return
        assert self.path is not None, "setup() sets the path"
        in_background = self._writer.in_background() if self.background and self._writer else contextlib.nullcontext()
        with in_background:
            trainer.save_checkpoint(str(self.path), weights_only=False)  # the full training state


def resolve_ckpt_path(ckpt_path: str, run_dir: str | RunPath) -> str:
    """The file ``--ckpt_path`` names: ``best``/``last`` of ``run_dir``'s ``checkpoints/``, or the path itself.

    Raises ``ValueError`` if there is no such file. (The command line resolves ``best``/``last`` across runs:
    see ``run/folders.plan_run``.)
    """
    run = location(run_dir) if isinstance(run_dir, str) else run_dir
    path = run / "checkpoints" / f"{ckpt_path}.ckpt" if ckpt_path in (BEST, LAST) else location(ckpt_path)
    if not path.is_file():
        raise ValueError(f"--ckpt_path {ckpt_path}: no such checkpoint file {path}")
    return str(path)


def read_checkpoint(path: str) -> dict[str, Any]:
    """Loads ``path`` with ``weights_only=True``; raises ``ValueError`` saying why it cannot be used (among the
    reasons: its bytes are not those its run recorded, ``digests.py``)."""
    source = location(path)
    data = source.read_bytes() if isinstance(source, StorePath) else None  # a store's object: read once
    if (len(data) if data is not None else source.stat().st_size) == 0:
        raise ValueError(f"checkpoint {path} is empty (0 bytes): it was never written, or its disk was full")
    try:
        if data is not None:
            checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        else:
            # mmap: tensors are mapped, not read, so this costs little even for large checkpoints. Only torch's zip
            # format maps; the legacy format (torch < 1.6, or `_use_new_zipfile_serialization=False`) is read whole.
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:
        # torch's message for a refused object names it (and carries terminal colour codes); for bytes that are
        # no pickle at all (a damaged legacy file), it says which opcode it could not read.
        text = plain(str(error))
        if found := re.search(r"GLOBAL (\S+) was not an allowed global|whose module (\S+) is blocked", text):
            raise ValueError(
                f"checkpoint {path} holds pickled Python objects and is refused (it needs {found[1] or found[2]})."
                " Only tensors and plain values load (torch.load weights_only=True); re-save its state_dicts from"
                " code you trust."
            ) from None
        detail = text.partition("WeightsUnpickler error:")[2].strip() or text.strip()
        raise ValueError(
            f"checkpoint {path} is not readable (truncated or corrupt?): {detail.splitlines()[0]}"
        ) from None
    except Exception as error:  # torch reports a damaged file as RuntimeError, EOFError, IndexError, ...
        raise ValueError(f"checkpoint {path} is not readable (truncated or corrupt?): {error!r}") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise ValueError(f"checkpoint {path} is not a Lightning checkpoint: it has no 'state_dict'")
    verify(source, data)  # after the checks above, which say more about a file that is not a checkpoint at all
    return checkpoint


def check_checkpoint(path: str, model: torch.nn.Module) -> None:
    """Raises ``ValueError`` unless ``path`` is a readable, pickle-free, finite checkpoint of ``model``'s architecture
    (its keys compared without ``torch.compile``'s ``_orig_mod.``: see ``compiled_keys.py``).

    The message names the model that wrote it, and (a few of each, with their counts) the keys missing from the
    checkpoint, those the model does not have, and those of another shape.
    """
    checkpoint = read_checkpoint(path)
    if bad := nonfinite_in_checkpoint(checkpoint):
        raise ValueError(
            f"checkpoint {path} holds NaN or Inf in {listed(bad)}: its numbers are no result to evaluate, export or"
            " resume from (a run of this kit never writes one; take an earlier checkpoint of its run)"
        )
    # In plain form: a module that compiles its network in `setup` holds `_orig_mod.` keys only after it.
    saved = {plain_key(key): value for key, value in checkpoint["state_dict"].items()}
    expected = {plain_key(key): value for key, value in model.state_dict().items()}
    missing, unexpected = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    resized = [f"{k} {_shape(saved[k])} vs {_shape(v)}" for k, v in expected.items() if _resized(saved, k, v)]
    if missing or unexpected or resized:
        details = "; ".join(
            f"{label} ({len(keys)}): {', '.join(keys[:4])}{', ...' if len(keys) > 4 else ''}{note}"
            for label, keys, note in (
                ("missing", missing, ""),
                ("unexpected", unexpected, ""),
                ("other shape", resized, " (checkpoint vs model)"),
            )
            if keys
        )
        configured = f"{type(model).__module__}.{type(model).__qualname__}"
        writer = checkpoint.get("hyper_parameters", {}).get("_class_path")
        by = "the same class with other arguments" if writer == configured else f"by {writer}"
        raise ValueError(
            f"checkpoint {path} was written by a different model than the configured {configured}"
            f"{f' ({by})' if isinstance(writer, str) else ''}: {details}. Use the config of the run that wrote it"
            " (its run directory holds config.yaml)."
        )


def _shape(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape)) or "scalar"


def _resized(saved: dict[str, object], key: str, value: torch.Tensor) -> bool:
    other = saved.get(key)
    return isinstance(other, torch.Tensor) and other.shape != value.shape
