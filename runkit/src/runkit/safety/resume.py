"""Exact resume: the two things a Lightning checkpoint lacks, the RNG states and the position in the epoch.

With both, ``fit --ckpt_path last`` continues an interrupted run as if it had never stopped: the same
batches in the same order, the same augmentation and dropout masks, bit-identical weights. The position
comes from the user's own train loader, rebuilt by ``resumable_data.make_resumable`` when Lightning asks
for it. Both are stored as tensors, lists and numbers, so checkpoints still load with
``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import CombinedLoader
from lightning.pytorch.utilities.model_helpers import is_overridden
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn

from ..lightning_internals import (
    end_loader_recording,
    epoch_restarted,
    restart_train_iterator,
    unread_loader_states,
    uses_distributed_sampler,
)
from .elastic import (
    STATE_KEY,
    DataLayout,
    check_processes,
    dropout_layers,
    kept_batch_line,
    not_elastic,
    not_used,
    resume_line,
    run_asked,
    saved_layout,
)
from .resumable_data import ResumableLoader, is_stateful, make_resumable, mid_epoch_resume
from .rng_state import collect_rng_state, restore_rng_state
from .seeding import key_seed, own_generators, seed_global_rngs
from .stateful_loaders import draws_unsaved, keep_worker_rngs
from .worker_start import start_safely


class ExactResume(Callback):
    """Makes the train loader resumable, and saves and restores the RNG states of every process.

    When ``fit`` starts, the ``train_dataloader`` hook of the datamodule (or of the LightningModule) is wrapped
    so that each loader it returns is rebuilt by ``make_resumable``: Lightning then saves its position in
    every checkpoint. A loader that cannot be rebuilt gets one warning, naming it, and is used as written. One that
    saves its own position (torchdata's ``StatefulDataLoader``) is kept, its workers' RNG states added to what it
    saves (``keep_worker_rngs``); what cannot be added is in that warning too. The
    validation, test and predict loaders get a generator of their own (``own_generators``), so that making their
    iterators never draws from the global RNG that dropout uses. Under DDP, every loader's workers start where they
    cannot hang (``worker_start.start_safely``). Whatever a wrapped hook returns goes to ``check_loaders`` first.

    Lightning checkpoints hold no RNG state, so dropout and any other random draw would follow another
    stream after a resume: the Python, NumPy and torch (CPU and current CUDA device) states are saved here.
    Lightning also drops the saved loader positions when ``configure_optimizers`` reads
    ``trainer.estimated_stepping_batches`` (lightning#20550) and at an epoch boundary: they are handed over here.
    Both are restored when training starts, after the sanity check (which runs in an isolated RNG) and before the
    first batch.

    Checkpoints also hold the run's ``DataLayout`` (its global batch per train loader): a fit from a checkpoint of
    another number of processes rebuilds the train loader with the same global batch (``elastic.py``). ``layout``
    holds this session's, ``facts`` what the run's provenance records of it.
    """

    layout: DataLayout | None = None
    facts: dict[str, Any] | None = None

    def __init__(
        self, check_loaders: Callable[[Any, str, Any], None] | None = None, saved: DataLayout | None = None
    ) -> None:
        """Configures the callback.

        Args:
            check_loaders: Called with the object, the hook's name and what it returned, as each wrapped loader hook
                returns (before any worker starts): the command's checks of the loaders, which raise to refuse them.
            saved: The data layout of the checkpoint this fit starts from (``None``: a new run, or a checkpoint
                without one), read by the command before the Trainer is built.
        """
        self.check_loaders = check_loaders
        self.saved = saved
        self._rng_states: list[dict[str, Any]] | None = None
        self._wrapped: list[tuple[Any, str, Any]] = []  # (object whose hook is wrapped, hook, its own attribute)
        self._warned = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # The hooks are wrapped, not the loaders: Lightning asks for a loader (again on every reload) after this,
        # in `estimated_stepping_batches` or when a loop starts, before it creates the epoch's iterator.
        self._warned = False
        source = trainer.datamodule if trainer.datamodule is not None else pl_module
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        processes = trainer.world_size
        for offset, hook in enumerate(("val_dataloader", "test_dataloader", "predict_dataloader"), start=1):
            self._wrap(
                source, hook, lambda loaders, seed=seed + offset: start_safely(own_generators(loaders, seed), processes)
            )
        # overfitting: Lightning replaces the train sampler with a sequential one itself
        if stage == "fit" and trainer.overfit_batches == 0:
            self._wrap(source, "train_dataloader", lambda loaders: self._resumable(trainer, loaders))
        elif stage == "fit":
            self._wrap(source, "train_dataloader", lambda loaders: loaders)  # checked all the same

    def _wrap(self, source: Any, hook: str, transform: Callable[[Any], Any]) -> None:
        if not is_overridden(hook, source):
            return  # no such loader, or loaders given to `fit` directly: checked when training starts
        original = getattr(source, hook)
        self._wrapped.append((source, hook, vars(source).get(hook)))
        setattr(source, hook, lambda: transform(self._checked(source, hook, original())))

    def _checked(self, source: Any, hook: str, loaders: Any) -> Any:
        if self.check_loaders is not None:
            self.check_loaders(source, hook, loaders)
        return loaders

    def _resumable(self, trainer: pl.Trainer, loaders: Any) -> Any:
        sharding = trainer.distributed_sampler_kwargs or {}
        if not uses_distributed_sampler(trainer):
            sharding = {}  # the user shards the data: Trainer(use_distributed_sampler=False)
        seed, processes = int(os.environ.get("PL_GLOBAL_SEED", 0)), trainer.world_size
        saved = self.saved
        if saved is not None:
            check_processes(saved, processes, str(trainer.ckpt_path))  # the command refused it already, if it ran
        per_sample = saved is None or saved.per_sample
        # The run's global batch, on any process count (a batch size asked otherwise is not used: `elastic.py`).
        sizes = saved.per_process(processes) if saved is not None and saved.per_sample else None
        asked = [getattr(loader, "batch_size", None) for loader in CombinedLoader(loaders).flattened]
        loaders, kept = make_resumable(loaders, seed, **sharding, batch_sizes=sizes, per_sample=per_sample)
        self._lay_out(trainer, loaders, kept, per_sample, bool(processes > 1 and not sharding), asked)
        loaders = start_safely(loaders, processes)
        unsaved = keep_worker_rngs(loaders)
        if (kept or unsaved) and not self._warned:
            self._warned = True
            self._warn(kept, unsaved)
        return loaders

    def _lay_out(
        self,
        trainer: pl.Trainer,
        loaders: Any,
        kept: list[str],
        per_sample: bool,
        sharded_by_user: bool,
        asked: list[int | None],
    ) -> None:
        """Records this session's data layout and what it means for a resume on another number of processes."""
        flattened, processes = CombinedLoader(loaders).flattened, trainer.world_size
        batches = tuple(
            loader.batch_size * loader.resumable_sampler.num_replicas
            if isinstance(loader, ResumableLoader) and not sharded_by_user
            else None
            for loader in flattened
        )
        saved = self.saved
        layout = DataLayout(batches, processes, per_sample, tuple(asked))
        if saved is not None and not_used(asked, saved, layout):  # the run's own sizes stay its record, not those
            layout = DataLayout(batches, processes, per_sample, run_asked(saved))
        self.layout = layout
        reasons = not_elastic(flattened, kept, sharded_by_user)
        if not per_sample:
            reasons.append("the run started under runkit 0.1, which seeds augmentation per batch")
        self.facts = {
            "global_batch": [batch for batch in batches if batch is not None],
            "per_process_batch": [loader.batch_size for loader in flattened if isinstance(loader, ResumableLoader)],
            "elastic": "not elastic: " + "; ".join(reasons) if reasons else "yes",
        }
        if saved is not None and saved.processes != processes:
            line = resume_line(saved, self.layout, reasons, dropout_layers(trainer.lightning_module), asked)
            self.facts["resumed_from_processes"] = saved.processes
            (rank_zero_warn if reasons else rank_zero_info)(line)
        elif saved is not None and (line := kept_batch_line(saved, self.layout, asked)):
            rank_zero_info(line)

    @staticmethod
    def _warn(kept: list[str], unsaved: list[str] | None = None) -> None:
        parts = []
        if kept:
            parts.append(
                "the train loader "
                + ". And ".join(kept)
                + ". It is used as written, its augmentation after a resume drawn from other random states: a resumed"
                " run will not match an uninterrupted one. A map-style Dataset in a plain DataLoader resumes exactly."
            )
        if unsaved:
            parts.append(
                "the train loader "
                + "; ".join(unsaved)
                + ". It saves its own position, not its workers' random state: a run resumed from a mid-epoch"
                " checkpoint continues that epoch with other random augmentation, so it will not match an"
                " uninterrupted run. A map-style Dataset resumes exactly."
            )
        rank_zero_warn("Exact resume: " + " And ".join(parts))

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._unwrap()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._unwrap()
        end_loader_recording()  # a hook that raised left Lightning's loader patches in place

    def _unwrap(self) -> None:
        while self._wrapped:
            source, hook, own = self._wrapped.pop()
            if own is None:
                delattr(source, hook)
            else:
                setattr(source, hook, own)

    def state_dict(self) -> dict[str, Any]:
        # Every process saves the checkpoint together (rank 0 writes it), so all can contribute their state.
        state = collect_rng_state()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, state)
        else:
            states = [state]
        layout = self.layout or DataLayout((), len(states), per_sample=True)  # no train loader of the kit's
        return {"rng": states, "data": layout.state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._rng_states = state_dict["rng"]
        if self.saved is None:  # `fit` called in code, not by the command
            self.saved = saved_layout({"callbacks": {STATE_KEY: state_dict}})

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loaders = CombinedLoader(trainer.train_dataloader).flattened
        if not any(hook == "train_dataloader" for _, hook, _ in self._wrapped) and not self._warned:
            kept = [loader for loader in loaders if not is_stateful(loader)]
            unsaved = [loader for loader in loaders if draws_unsaved(loader)]  # its workers started already
            if (kept or unsaved) and trainer.overfit_batches == 0:
                self._warned = True
                self._warn(_passed_directly(kept, kept=True), _passed_directly(unsaved))
        # Before the RNG states: making an iterator of a loader without a generator draws its workers' seed from them.
        loaded = self._load_positions(trainer, [loader for loader in loaders if is_stateful(loader)])
        states, self._rng_states = self._rng_states, None
        if states is not None:
            restore_rng_state(states[trainer.global_rank % len(states)])
            if trainer.global_rank >= len(states):  # a process the checkpoint's run did not have: a stream of its own
                seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
                seed_global_rngs(key_seed(seed, trainer.global_step, trainer.global_rank))
        if loaded and not epoch_restarted(trainer):
            # At an epoch boundary the loop starts the next epoch on the iterator it has (not another, as without a
            # stop): the one made above ended the saved epoch; the next is made as then, from the restored RNGs.
            restart_train_iterator(trainer)

    @staticmethod
    def _load_positions(trainer: pl.Trainer, stateful: list[Any]) -> bool:
        """Gives the train loaders the positions Lightning left unread (Lightning saves those of the loaders that
        have one, in order), and makes the epoch's iterator again from them; returns whether it did."""
        states = unread_loader_states(trainer)
        if not states:
            return False
        if len(states) != len(stateful):
            rank_zero_warn(
                f"The checkpoint holds the positions of {len(states)} train loaders, this run has {len(stateful)}:"
                " the interrupted epoch's data starts over."
            )
            return False
        for loader, state in zip(stateful, states, strict=True):
            loader.load_state_dict(state)
        restart_train_iterator(trainer)
        return True


def _passed_directly(loaders: list[Any], kept: bool = False) -> list[str]:
    """The warning's words for loaders given to ``fit`` itself; for ``kept`` ones (no position saved), what a resume
    from a mid-epoch checkpoint trains of each."""
    said = "passed to `fit` directly, not returned by a `train_dataloader` hook"
    if kept:
        return [f"{type(loader).__name__}: {said}; {mid_epoch_resume(loader)}" for loader in loaders]
    return [f"{', '.join(type(loader).__name__ for loader in loaders)}: {said}"] if loaders else []
