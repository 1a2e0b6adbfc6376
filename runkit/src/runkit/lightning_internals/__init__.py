"""Every use of a private Lightning API in the kit, in one place, each with the reason and a test that names it.

Private names change between Lightning minors without notice: ``pyproject.toml`` bounds ``lightning`` to the
minors these are tested on, and ``tests/test_lightning_internals.py`` checks each one against the installed
Lightning, so an upgrade that breaks one fails there, by name, not somewhere deep in a run.

Here: those the commands use (the Trainer's and its loops' state, LightningCLI's parts, the checkpoint layouts and
the object store test). ``tools.py``: those only the opt-in tools reach (the finders, the schedule preview, W&B).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import lightning.pytorch as pl
from fsspec import AbstractFileSystem
from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.fabric.utilities import cloud_io
from lightning.fabric.utilities.load import _METADATA_FILENAME
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy, Strategy
from torch.utils.data import BatchSampler, DataLoader


def take_over_signals(trainer: pl.Trainer) -> None:
    """Keeps Lightning from installing its own SIGTERM/SIGUSR1 handlers when a run starts (``kit/safety/signals.py``
    handles them).

    Lightning's handler broadcasts a tensor from inside the signal handler under DDP, a collective the other ranks
    are not in (they hang: issue 14), forwards the signal to the processes it launched, and exits 0
    (lightning#21623). There is no public switch: ``_SignalConnector.register_signal_handlers`` runs in every
    ``Trainer._run``.
    """
    connector = trainer._signal_connector
    connector.register_signal_handlers = lambda: None  # type: ignore[method-assign]
    connector.received_sigterm = False


def request_stop(trainer: pl.Trainer) -> None:
    """Makes Lightning's loops stop as they do on SIGTERM: after the current batch's bookkeeping (its scheduler step
    included), with ``SIGTERMException``. ``Trainer.received_sigterm`` has no setter."""
    trainer._signal_connector.received_sigterm = True


def logger_writes_now(trainer: pl.Trainer) -> bool:
    """Whether the loggers write what is logged now: at every ``log_every_n_steps``-th optimizer step of training (and
    as the run stops), every ``log_every_n_steps``-th batch of an evaluation. ``LoggerConnector.should_update_logs``
    is private."""
    return bool(trainer._logger_connector.should_update_logs)


def around_process_group_setup(trainer: pl.Trainer, context: Callable[[], AbstractContextManager[Any]]) -> None:
    """Runs ``trainer.strategy.setup_environment`` (where the run's processes meet: ``init_process_group``) inside
    ``context()``. Lightning has no hook before it: the callbacks' ``setup`` comes after, so this wraps the method on
    this strategy object (``safety/rendezvous.py``)."""
    strategy = trainer.strategy
    setup = strategy.setup_environment

    def setup_environment() -> None:
        with context():
            setup()

    strategy.setup_environment = setup_environment  # type: ignore[method-assign]


def cluster_environment(trainer: pl.Trainer) -> ClusterEnvironment:
    """The cluster environment the Trainer detected (SLURM, torchelastic, ...); single-device strategies keep it only
    in the private accelerator connector."""
    return trainer._accelerator_connector.cluster_environment


def uses_distributed_sampler(trainer: pl.Trainer) -> bool:
    """Whether Lightning shards the training data itself (``Trainer(use_distributed_sampler=...)`` has no getter)."""
    return bool(getattr(trainer._accelerator_connector, "use_distributed_sampler", True))


def logged_names(trainer: pl.Trainer) -> set[str]:
    """The names of the epoch-level metrics the running loop has logged, every validation loader's included.

    ``trainer.callback_metrics`` leaves out those of a loader of several (``val/loss/dataloader_idx_0``) at the end
    of the sanity check: Lightning does not update it then, and reads the loop's metrics of the current
    ``dataloader_idx`` only (``None`` by then; each loader's values are reset when it ends). Their names stay in the
    loop's result collection (``trainer._results``, private), named as Lightning names them (``_forked_name``).
    """
    names = set(trainer.callback_metrics)
    results = trainer._results
    if results is not None:
        for metric in results.values():
            if metric.meta.on_epoch:
                names.update(results._forked_name(metric, on_step=False))
    return names


def count_scheduler_step(trainer: pl.Trainer) -> None:
    """Counts a scheduler step the kit takes in the fit loop's place (``safety/plateau_resume.py``) as the loop counts
    its own (``_TrainingEpochLoop.scheduler_progress``, saved in checkpoints; loops are not public API): a resumed
    run's counter then equals an uninterrupted run's (it was 1 where that one's was 2)."""
    progress = trainer.fit_loop.epoch_loop.scheduler_progress
    progress.increment_ready()
    progress.increment_completed()


def epoch_restarted(trainer: pl.Trainer) -> bool:
    """Whether the epoch now ending is the one a run resumed into, where Lightning skips plateau schedulers
    (``FitLoop.on_advance_end``'s guard from lightning#14702). Loops are not public API."""
    return trainer.fit_loop.restarting


def unread_loader_states(trainer: pl.Trainer) -> list[dict[str, Any]]:
    """The train loaders' saved positions that Lightning restored from the checkpoint but did not give them; taken.

    Lightning gives them only to loaders it makes after restoring the loop state, and only mid-epoch
    (``FitLoop._load_combined_loader_states``): ``trainer.estimated_stepping_batches`` in ``configure_optimizers``
    makes the loaders before (lightning#20550), and a run resumed at an epoch boundary is not "restarting", so a
    loader that carries state across epochs (the shuffling generator of torchdata's sampler, the seed of the kit's)
    starts the next one from its initial state. Both leave ``_combined_loader_states_to_load`` unread.
    """
    loop = trainer.fit_loop
    states, loop._combined_loader_states_to_load = loop._combined_loader_states_to_load, []
    return states


def restart_train_iterator(trainer: pl.Trainer) -> None:
    """Makes the epoch's train iterator again, as ``FitLoop.setup_data`` does: a loader that applies a loaded position
    when its iterator is made (torchdata's ``StatefulDataLoader``) ignores one loaded after. The loop keeps the
    iterator in its private ``_data_fetcher``."""
    fetcher = trainer.fit_loop._data_fetcher
    if fetcher is not None:
        fetcher.teardown()  # the current iterator's workers end first: no worker is forked beside a live set
        iter(fetcher)


def end_loader_recording() -> None:
    """Gives ``DataLoader``, ``BatchSampler`` and their subclasses back their own ``__init__``, ``__setattr__`` and
    ``__delattr__``, after a ``*_dataloader`` hook raised.

    While a hook runs, Lightning patches them to record how each loader is made and every attribute set on it
    (``_replace_dunder_methods``, to remake loaders), and restores them after a ``yield`` with no ``finally``. A hook
    that raised (the kit's own refusals among them) left them patched for the rest of the process: every later
    loader kept every iterator it made in its record, with the iterator's idle workers, until the loader was
    collected (a 5 s join per worker then). A search or sweep worker runs its trials in one such process.
    """
    classes = [DataLoader, BatchSampler]
    for cls in classes:
        classes.extend(cls.__subclasses__())  # the classes Lightning patched: each base's, at any depth
        for name in ("__setattr__", "__delattr__", "__init__"):
            if (own := cls.__dict__.get(f"__old{name}")) is not None:
                setattr(cls, name, own)
                delattr(cls, f"__old{name}")


VALIDATION_NOT_DONE = {
    "total": {"ready": 1, "started": 1, "processed": 0, "completed": 0},
    "current": {"ready": 1, "started": 1, "processed": 0, "completed": 0},
    "is_last_batch": False,
}
"""The validation loop's progress as Lightning saves it when interrupted in the step of its first batch: resuming from
it runs the whole validation again (Lightning's RESTARTED_MID_EVALUATION)."""


def mark_validation_not_done(checkpoint: dict[str, Any]) -> None:
    """Records in ``checkpoint`` the fit loop's validation as not run yet, so that a resume runs it from its first
    batch (a validation cut short by a stop: Lightning would skip what is left of it). The loops' saved state is
    Lightning's private format."""
    checkpoint["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"] = VALIDATION_NOT_DONE


def mark_epoch_not_started(checkpoint: dict[str, Any]) -> None:
    """Records in ``checkpoint`` the epoch the fit loop had just made ready as not begun, as a stop at the previous
    epoch's end saves it: Lightning 2.6 resumes a checkpoint saved in ``on_train_epoch_start`` with the previous
    epoch's batch counts and skips the whole epoch. The loops' saved state is Lightning's private format."""
    progress = checkpoint["loops"]["fit_loop"]["epoch_progress"]
    for counts in (progress["total"], progress["current"]):
        counts["ready"] = counts["started"]


def epochs_completed(trainer: pl.Trainer) -> int:
    """Epochs whose training is complete (the loop counts one as processed before its end-of-epoch checkpoint; the
    loops' progress counters are not public API)."""
    return int(trainer.fit_loop.epoch_progress.current.processed)


SHARDED_METADATA: str = _METADATA_FILENAME
"""The file of a sharded checkpoint's folder that holds everything but the weights and optimizer states (``meta.pt``):
Lightning's sharded loads read it, and take a folder that has it for a sharded checkpoint (``_is_sharded_checkpoint``);
the name is private."""


def saves_sharded(strategy: Strategy) -> bool:
    """Whether ``strategy`` saves checkpoints as folders of shards: ``FSDPStrategy(state_dict_type="sharded")`` or
    ``ModelParallelStrategy(save_distributed_checkpoint=True)`` (its default). Both settings are private attributes."""
    if isinstance(strategy, FSDPStrategy):
        return strategy._state_dict_type == "sharded"
    if isinstance(strategy, ModelParallelStrategy):
        return bool(strategy._save_distributed_checkpoint)
    return False


def sharded_state(strategy: Strategy, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Takes the weights and optimizer states out of ``checkpoint``, keyed as the strategy's sharded load reads them
    (``FSDPStrategy``: ``model``, ``ModelParallelStrategy``: ``state_dict``; ``optimizer_<i>`` each): the layout its
    ``save_checkpoint`` writes with ``torch.distributed.checkpoint`` is Lightning's private format."""
    state = {"model" if isinstance(strategy, FSDPStrategy) else "state_dict": checkpoint.pop("state_dict")}
    state.update({f"optimizer_{index}": value for index, value in enumerate(checkpoint.pop("optimizer_states", []))})
    return state


LIGHTNING_IS_OBJECT_STORAGE = cloud_io._is_object_storage  # Lightning's own, which the kit's replaces (its test)
OBJECT_STORES = {"s3fs": "S3FileSystem", "gcsfs": "GCSFileSystem", "adlfs": "AzureBlobFileSystem"}


def is_object_storage(fs: AbstractFileSystem) -> bool:
    """Lightning's ``cloud_io._is_object_storage`` without its imports: it imported s3fs, gcsfs and adlfs wherever
    installed, so every local ``fit`` imported s3fs (``ModelCheckpoint.setup``; 0.19 s of the 3 s of CPU of a small
    one here). A file system of theirs exists only once its package is imported."""
    stores = (getattr(sys.modules.get(name), cls, None) for name, cls in OBJECT_STORES.items())
    return any(isinstance(fs, store) for store in stores if isinstance(store, type))  # `sys.modules[name] = None`: no


def check_object_storage_without_imports() -> None:
    """Lightning's ``_is_dir`` asks ``is_object_storage`` from now on (``cloud_io`` reads the name as it runs)."""
    cloud_io._is_object_storage = is_object_storage


class FitKeepsItsModel:
    """LightningCLI mixin: ``fit --ckpt_path <file>`` builds the model the command names, not the checkpoint's.

    LightningCLI's private ``_parse_ckpt_path`` replaces the command's model arguments with the checkpoint's
    hyperparameters when ``ckpt_path`` is a file: presets and flags were dropped without a word (issue 15). For
    ``fit`` the kit compares them instead and refuses a resume that asks for another model (``resume_keys.py``);
    ``validate``, ``test`` and ``predict`` keep Lightning's way (they evaluate the model the checkpoint holds), and
    ``model_replaced`` gets the command's model settings and the checkpoint's.
    """

    def _parse_ckpt_path(self) -> None:
        subcommand = self.config.get("subcommand")  # type: ignore[attr-defined]
        if subcommand == "fit":
            return
        given = self.config[subcommand].get("model") if subcommand else None  # type: ignore[attr-defined]
        given = given.clone() if hasattr(given, "clone") else given
        super()._parse_ckpt_path()  # type: ignore[misc]
        if given is not None:
            self.model_replaced(str(subcommand), given, self.config[subcommand].get("model"))  # type: ignore[attr-defined]

    def model_replaced(self, subcommand: str, given: Any, loaded: Any) -> None:
        """Called with the model settings the command gave and those it evaluates (the checkpoint's, or the same)."""


class CLIInternals:
    """LightningCLI mixin: its private helpers the kit's CLI uses, and its private runner, named here.

    ``_parser(subcommand)`` and ``_get(config, key)`` reach a subcommand's parser and a key of its config;
    ``_run_subcommand`` is where a subcommand runs, the one place the kit can stand around every command (stop
    signals, the run's session, setup errors), and ``_prepare_subcommand_kwargs`` its arguments from the config.
    LightningCLI has no public hook for either. (The kit defines no ``before_<subcommand>``/``after_<subcommand>``
    hooks, which ``_run_subcommand`` would also call.)
    """

    def subcommand_parser(self, subcommand: str | None) -> Any:
        return self._parser(subcommand)  # type: ignore[attr-defined]

    def config_value(self, config: Any, key: str, default: Any = None) -> Any:
        return self._get(config, key, default=default)  # type: ignore[attr-defined]

    def _run_subcommand(self, subcommand: str) -> None:
        self.run_subcommand(subcommand, self._prepare_subcommand_kwargs(subcommand))  # type: ignore[attr-defined]

    def run_subcommand(self, subcommand: str, arguments: dict[str, Any]) -> None:
        """Runs the subcommand (the Trainer's method of that name) with ``arguments``; a subclass stands around it."""
        getattr(self.trainer, subcommand)(**arguments)  # type: ignore[attr-defined]
