"""Where a run's checkpoints live, the best and the newest one, and which file ``--ckpt_path`` names.

``checkpoints/best.ckpt`` comes from ``BestCheckpoint`` (Lightning's ``ModelCheckpoint`` on the monitored
metric); ``checkpoints/last.ckpt`` from ``LastCheckpoint``. The file ``--ckpt_path best|last|<file>``
names (which run's: see ``run/folders.py``) is checked before anything runs (``checkpoint_checks.py``).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info

from ..lightning_internals import SHARDED_METADATA, logged_names
from ..store import RunPath, location
from .background_save import BackgroundWriter
from .boundaries import StepBoundary
from .monitor_mode import checked_mode, without_loader

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
        self._writer: BackgroundWriter | None = None  # the kit's checkpoint writer, where it writes the checkpoints

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.path = location(trainer.strategy.broadcast(str(checkpoint_dir(trainer) / f"{LAST}.ckpt")))
        writer = trainer.strategy.checkpoint_io
        self._writer = writer if isinstance(writer, BackgroundWriter) else None
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
    if not path.is_file() and not (path / SHARDED_METADATA).is_file():  # a file, or a sharded checkpoint's folder
        raise ValueError(f"--ckpt_path {ckpt_path}: no such checkpoint file {path}")
    return str(path)


def read_checkpoint(path: str) -> dict[str, Any]:
    """``checkpoint_checks.read_checkpoint``: imported by the commands that load a checkpoint, not by a plain fit."""
    from .checkpoint_checks import read_checkpoint as read

    return read(path)


def check_checkpoint(path: str, model: torch.nn.Module) -> None:
    """``checkpoint_checks.check_checkpoint``: imported by the commands that load a checkpoint, not by a plain fit."""
    from .checkpoint_checks import check_checkpoint as check

    check(path, model)
