"""Loaders that save their own position (torchdata's ``StatefulDataLoader``): kept as written, with their workers' RNGs.

Lightning stores such a loader's ``state_dict`` in every checkpoint: its sampler's place and, for each worker, the
state of a dataset that has one (``state_dict``/``load_state_dict``). Not the global RNGs a worker draws augmentation
from in ``__getitem__``: a run resumed mid-epoch starts each worker at its first seed again, and the rest of that
epoch gets other augmentation (weights 0.04 away from an uninterrupted run after 16 steps in
``tests/kit/test_foreign_code.py``).

``keep_worker_rngs`` adds those states to what the loader saves, without rebuilding it: its ``worker_init_fn`` becomes
``WorkerRngs``, which runs the loader's own and then gives the worker's copy of the dataset a ``state_dict`` and a
``load_state_dict`` that hold the worker's RNG states (and the dataset's own state, if it has one). torchdata snapshots
them with every batch a worker sends and restores them in the new worker on resume, as for any stateful dataset.
Nothing else changes: a run that is never stopped draws exactly what it would without the kit. Without workers the
dataset draws from the main process's RNGs, which ``ExactResume`` restores.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import IterableDataset, get_worker_info

from .resumable_data import is_stateful
from .rng_state import collect_rng_state, restore_rng_state

_RNG = "worker_rngs"  # the worker's RNG states, in the state its dataset reports
_DATASET = "dataset"  # the dataset's own state, when it has one


class WorkerRngs:
    """A ``worker_init_fn``: the loader's own, then the worker's RNG states become part of its dataset's state."""

    def __init__(self, worker_init_fn: Callable[[int], None] | None = None) -> None:
        """Wraps a loader's ``worker_init_fn``.

        Args:
            worker_init_fn: The loader's own ``worker_init_fn``, run first; ``None`` if it had none.
        """
        self.worker_init_fn = worker_init_fn

    def __call__(self, worker_id: int) -> None:
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)
        info = get_worker_info()
        if info is None:  # called by hand, outside a worker
            return
        dataset = info.dataset  # this worker's copy: the user's object in the main process is left alone
        own_state = dataset.state_dict if is_stateful(dataset) else None
        own_load = dataset.load_state_dict if is_stateful(dataset) else None

        def state_dict() -> dict[str, Any]:
            state: dict[str, Any] = {_RNG: collect_rng_state()}
            if own_state is not None:
                state[_DATASET] = own_state()
            return state

        def load_state_dict(state: dict[str, Any]) -> None:
            if _RNG not in state:  # saved before the kit kept the RNGs: the dataset's own state
                if own_load is not None:
                    own_load(state)
                return
            if own_load is not None and _DATASET in state:
                own_load(state[_DATASET])
            restore_rng_state(state[_RNG])  # last: loading the dataset's state may draw

        dataset.state_dict = state_dict
        dataset.load_state_dict = load_state_dict


def keep_worker_rngs(loaders: Any) -> list[str]:
    """Makes each torchdata ``StatefulDataLoader`` with workers in ``loaders`` save its workers' RNG states.

    Returns:
        One line per such loader whose workers' random draws cannot be saved, naming it and why.
    """
    combined = loaders if isinstance(loaders, CombinedLoader) else CombinedLoader(loaders)
    unsaved = []
    for loader in combined.flattened:
        if not draws_unsaved(loader):
            continue
        reason = why_not_kept(loader.dataset)
        if reason is None:
            loader.worker_init_fn = WorkerRngs(loader.worker_init_fn)
        else:
            unsaved.append(f"{type(loader).__name__} over {type(loader.dataset).__name__}: {reason}")
    return unsaved


def draws_unsaved(loader: object) -> bool:
    """Whether ``loader`` is a ``StatefulDataLoader`` with workers whose RNG states it does not save (yet)."""
    module = sys.modules.get("torchdata.stateful_dataloader")  # imported by whatever made a StatefulDataLoader
    return (
        module is not None
        and isinstance(loader, module.StatefulDataLoader)
        and loader.num_workers > 0
        and not isinstance(loader.worker_init_fn, WorkerRngs)  # not the same loader, returned again by the hook
    )


def why_not_kept(dataset: object) -> str | None:
    """Why ``WorkerRngs`` cannot save the RNG states of workers that load ``dataset``, or ``None`` if it can."""
    if isinstance(dataset, IterableDataset):
        return "an IterableDataset, whose stream in each worker is its own to save"
    if not hasattr(dataset, "__dict__"):
        return "a dataset that takes no attributes, so it cannot report its workers' RNG states"
    return None
