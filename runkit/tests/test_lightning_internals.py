"""The private Lightning APIs the kit uses (``src/runkit/lightning_internals/``) exist in the installed Lightning,
and the Lightning behaviour each works around is still there: an upgrade that changes one fails here, by name."""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric.strategies.fsdp import _is_sharded_checkpoint
from lightning.fabric.utilities import cloud_io
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos import BoringModel
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy
from support import submodule
from torch import Tensor, nn
from torch.utils.data import DataLoader


def test_every_private_name_the_kit_uses_exists() -> None:
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    connector = trainer._signal_connector  # take_over_signals, request_stop
    assert callable(connector.register_signal_handlers)
    assert connector.received_sigterm is False
    assert trainer._accelerator_connector.cluster_environment is not None  # cluster_environment
    loop = trainer.fit_loop
    assert loop.restarting is False  # epoch_restarted
    assert loop._combined_loader_states_to_load == []  # unread_loader_states
    assert loop._data_fetcher is None  # restart_train_iterator
    assert loop.epoch_progress.current.processed == 0  # epochs_completed
    progress = loop.epoch_loop.scheduler_progress  # count_scheduler_step
    submodule("lightning_internals").count_scheduler_step(trainer)
    assert (progress.total.ready, progress.total.completed, progress.current.completed) == (1, 1, 1)
    assert callable(loop.teardown)  # end_fit_loop
    assert (loop.max_epochs, loop.epoch_loop.max_steps) == (None, -1)  # run_exactly's limits
    assert callable(LightningCLI._parse_ckpt_path)  # FitKeepsItsModel
    for name in ("_parser", "_get", "_run_subcommand", "_prepare_subcommand_kwargs"):  # CLIInternals
        assert callable(getattr(LightningCLI, name)), name
    assert trainer._accelerator_connector.use_distributed_sampler is True  # uses_distributed_sampler
    assert pl.callbacks.BatchSizeFinder()._early_exit is False  # end_fit_when_found
    assert callable(trainer._data_connector.attach_data)  # attach_for_fit
    internals = submodule("lightning_internals.tools")
    assert internals.LRFinderResult.__name__ == "_LRFinder"  # what Tuner.lr_find returns
    assert callable(internals.call._call_lightning_datamodule_hook)  # attach_for_fit
    nested = {"optimizer": {"class_path": "AdamW", "init_args": {"lr": 0.1}}, "layers": [2, 3]}
    flat = {"optimizer/class_path": "AdamW", "optimizer/init_args/lr": 0.1, "layers": [2, 3]}
    assert internals.flat_hyperparameters(nested) == flat  # as MLFlowLogger.log_hyperparams flattens them
    model = BoringModel()
    model.trainer = trainer
    optimizers, schedulers = internals.configured_optimizers(model)  # `_init_optimizers_and_lr_schedulers`
    assert (len(optimizers), len(schedulers)) == (1, 1)


class Positions:
    """A loader that saves its position and, like torchdata's ``StatefulDataLoader``, applies a loaded one in
    ``__iter__``: an iterator made before ``load_state_dict`` starts from the beginning."""

    def __init__(self) -> None:
        self.next, self._start = 0, 0

    def __len__(self) -> int:
        return 8

    def __iter__(self) -> Iterator[Tensor]:
        start, self._start = self._start, 0
        return self._batches(start)

    def _batches(self, start: int) -> Iterator[Tensor]:
        for self.next in range(start, 8):
            yield torch.tensor([[float(self.next)]])
        self.next = 8

    def state_dict(self) -> dict[str, int]:
        return {"next": self.next + 1}  # saved after the batch at `next` was trained on

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._start = state["next"]


class Scheduled(pl.LightningModule):
    """Records the batches it trains on; ``configure_optimizers`` reads ``estimated_stepping_batches``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer, self.seen = nn.Linear(1, 1), []

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        self.seen.append(int(batch.item()))
        return self.layer(batch).sum()

    def train_dataloader(self) -> Positions:
        return Positions()

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        total = int(self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.LinearLR(optimizer, total_iters=total)}


class SaveAt(Callback):
    """Saves a checkpoint at the end of the 3rd training batch (mid-epoch) or of the first epoch."""

    def __init__(self, path: Path, epoch_end: bool) -> None:
        self.path, self.epoch_end = path, epoch_end

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == 3 and not self.epoch_end:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch == 0 and self.epoch_end:
            trainer.save_checkpoint(self.path)


class HandOver(Callback):
    """What ``ExactResume`` does as training starts: the unread positions, loaded, and the iterator made again."""

    def __init__(self, handover: bool) -> None:
        self.handover = handover
        self.unread: list[dict[str, Any]] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        internals = submodule("lightning_internals")
        self.unread = internals.unread_loader_states(trainer)
        if self.handover:
            trainer.train_dataloader.load_state_dict(self.unread[0])
            internals.restart_train_iterator(trainer)
            if not internals.epoch_restarted(trainer):  # the saved epoch ended: the next one starts
                internals.restart_train_iterator(trainer)


def _trainer(**kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


@pytest.mark.parametrize("handover", [False, True], ids=["lightning", "handed-over"])
@pytest.mark.parametrize("epoch_end", [False, True], ids=["mid-epoch", "epoch-end"])
def test_positions_lightning_leaves_unread_are_given_to_the_loader(
    tmp_path: Path, handover: bool, epoch_end: bool
) -> None:
    path = tmp_path / "saved.ckpt"
    _trainer(max_epochs=1, callbacks=[SaveAt(path, epoch_end)]).fit(Scheduled())
    saved = torch.load(path, weights_only=True)["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert saved == [{"next": 8 if epoch_end else 3}]
    callback, model = HandOver(handover), Scheduled()
    _trainer(max_epochs=2 if epoch_end else 1, callbacks=[callback]).fit(model, ckpt_path=path)
    assert callback.unread == saved  # lightning#20550 mid-epoch; not "restarting" at an epoch boundary
    if epoch_end:  # the loader's next epoch, as it would have started it: here from its start
        assert model.seen == list(range(8))
    else:
        assert model.seen == ([3, 4, 5, 6, 7] if handover else [0, 1, 2, 3, 4])


class TwoLoaders(BoringModel):
    """Logs ``val/loss`` on each of two validation loaders."""

    def validation_step(self, batch: Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val/loss", self.step(batch))

    def val_dataloader(self) -> list[Any]:
        return [super().val_dataloader(), super().val_dataloader()]


class NamesAtSanityEnd(Callback):
    def on_sanity_check_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.callback_metrics = set(trainer.callback_metrics)
        self.logged = submodule("lightning_internals").logged_names(trainer)


def test_the_metrics_of_several_validation_loaders_are_named_at_the_end_of_the_sanity_check() -> None:
    names = NamesAtSanityEnd()
    trainer = pl.Trainer(
        max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[names]
    )
    trainer.fit(TwoLoaders())
    assert names.callback_metrics == set()  # what Lightning gives: the reason for `logged_names`
    assert names.logged == {"val/loss/dataloader_idx_0", "val/loss/dataloader_idx_1"}


class LoggingSteps(Callback):
    """Records, at each training batch, whether the loggers write what is logged now."""

    def __init__(self) -> None:
        self.writes: list[bool] = []

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.writes.append(submodule("lightning_internals").logger_writes_now(trainer))


def test_the_loggers_write_step_values_every_log_every_n_steps(tmp_path: Path) -> None:
    # logging_step (kit/parts/step_logging.py) asks this: a step value logged elsewhere reaches no logger.
    recorder = LoggingSteps()
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        max_steps=7,
        log_every_n_steps=3,
        callbacks=[recorder],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(BoringModel())
    assert recorder.writes == [False, False, True, False, False, True, False]  # the 3rd and 6th steps


def test_a_checkpoint_whose_validation_is_marked_not_done_runs_it_again_on_resume(tmp_path: Path) -> None:
    # mark_validation_not_done writes the progress Lightning itself saves when a validation's first batch is cut short.
    internals = submodule("lightning_internals")
    trainer = pl.Trainer(default_root_dir=tmp_path, max_steps=2, limit_val_batches=2, val_check_interval=2,
                         enable_progress_bar=False, enable_model_summary=False, logger=False)  # fmt: skip
    trainer.fit(BoringModel())
    checkpoint = {"loops": {"fit_loop": trainer.fit_loop.state_dict()}}
    internals.mark_validation_not_done(checkpoint)
    saved = checkpoint["loops"]["fit_loop"]["epoch_loop.val_loop.batch_progress"]
    assert saved.keys() == trainer.fit_loop.epoch_loop.val_loop.batch_progress.state_dict().keys()
    trainer.fit_loop.epoch_loop.val_loop.batch_progress.load_state_dict(saved)
    assert trainer.fit_loop.epoch_loop.val_loop.batch_progress.current.processed == 0


def test_a_checkpoint_saved_as_an_epoch_starts_resumes_that_whole_epoch_once_marked_not_started(
    tmp_path: Path,
) -> None:
    # safety/preemption.py stops in on_train_epoch_start for a signal that came during the epoch end's saves.
    internals = submodule("lightning_internals")

    class SaveAsEpochOneStarts(Callback):
        def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
            if trainer.current_epoch == 1:
                trainer.save_checkpoint(tmp_path / "start.ckpt")

    def trainer(*callbacks: Callback) -> pl.Trainer:
        return pl.Trainer(default_root_dir=tmp_path, max_epochs=2, limit_train_batches=3, limit_val_batches=0,
                          enable_progress_bar=False, enable_model_summary=False, logger=False,
                          enable_checkpointing=False, callbacks=list(callbacks))  # fmt: skip

    trainer(SaveAsEpochOneStarts()).fit(BoringModel())
    checkpoint = torch.load(tmp_path / "start.ckpt", weights_only=False)
    as_saved = trainer()
    as_saved.fit(BoringModel(), ckpt_path=tmp_path / "start.ckpt")
    assert as_saved.global_step < 6  # Lightning 2.6 resumes epoch 1 with epoch 0's batch counts: cut short
    internals.mark_epoch_not_started(checkpoint)
    torch.save(checkpoint, tmp_path / "marked.ckpt")
    marked = trainer()
    marked.fit(BoringModel(), ckpt_path=tmp_path / "marked.ckpt")
    assert (marked.global_step, marked.current_epoch) == (6, 2)


class RefusedLoader(BoringModel):
    def train_dataloader(self) -> Any:
        raise ValueError("refused in the hook")


def recording() -> bool:
    """Whether a DataLoader made now records how it was made and each attribute set on it (Lightning's patches)."""
    return hasattr(DataLoader(range(4)), "__pl_saved_args")


@pytest.mark.parametrize("kit", [False, True], ids=["lightning-alone", "with-exact-resume"])
def test_a_loader_hook_that_raises_leaves_no_patch_on_the_loader_classes(tmp_path: Path, kit: bool) -> None:
    # lightning_internals.end_loader_recording: Lightning restores DataLoader's methods after a `yield`
    # with no `finally`; left patched, later loaders kept every iterator they made, with its workers (20-50 s of joins).
    callbacks = [submodule("safety.resume").ExactResume()] if kit else []
    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)  # fmt: skip
    assert not recording()
    try:
        with pytest.raises(ValueError, match="refused in the hook"):
            trainer.fit(RefusedLoader())
        assert recording() is not kit  # Lightning 2.6 alone leaves them patched: the workaround is still needed
    finally:
        submodule("lightning_internals").end_loader_recording()
    assert not recording()


def test_lightning_imports_every_object_store_to_tell_a_local_folder_and_the_kit_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # lightning_internals.is_object_storage: Lightning's `_is_dir` imported s3fs (aiobotocore, aiohttp, urllib3 with
    # it) wherever it was installed, on every local fit.
    internals = submodule("lightning_internals")
    asked: list[str] = []
    monkeypatch.setattr(cloud_io, "module_available", lambda name: asked.append(name) or False)
    local = cloud_io.get_filesystem(tmp_path)
    assert internals.LIGHTNING_IS_OBJECT_STORAGE(local) is False
    assert sorted(asked) == ["adlfs", "gcsfs", "s3fs"]  # Lightning 2.6 still imports each: the workaround is needed
    asked.clear()
    internals.check_object_storage_without_imports()
    assert cloud_io._is_dir(local, tmp_path, strict=True)
    assert asked == []
    monkeypatch.undo()
    s3 = pytest.importorskip("s3fs").S3FileSystem(anon=True, skip_instance_cache=True)  # asks the store nothing yet
    assert internals.is_object_storage(s3) is internals.LIGHTNING_IS_OBJECT_STORAGE(s3) is True
    assert internals.is_object_storage(cloud_io.get_filesystem("memory://x")) is False
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # how a test or an app blocks a package's import
    assert internals.is_object_storage(local) is False


def test_around_process_group_setup_runs_the_strategys_environment_setup_inside_the_context() -> None:
    # safety/rendezvous.py: Lightning has no hook before the processes meet; the callbacks' setup comes after.
    entered: list[str] = []

    class Setup(Callback):
        def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
            entered.append("callback setup")

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        entered.append("enter")
        yield
        entered.append("exit")

    trainer = pl.Trainer(
        fast_dev_run=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, callbacks=[Setup()]
    )
    setup = trainer.strategy.setup_environment
    submodule("lightning_internals").around_process_group_setup(trainer, context)
    trainer.fit(BoringModel())
    assert entered == ["enter", "exit", "callback setup"]
    assert callable(setup)  # Strategy.setup_environment: where DDP's init_process_group runs


def test_sharded_strategies_are_known_by_their_private_settings_and_write_the_layout_the_kit_writes(
    tmp_path: Path,
) -> None:
    # safety/sharded_checkpoints.py saves these strategies' checkpoints in their place, as Lightning would lay them out.
    internals = submodule("lightning_internals")
    assert internals.saves_sharded(FSDPStrategy(state_dict_type="sharded"))  # _state_dict_type
    assert not internals.saves_sharded(FSDPStrategy(state_dict_type="full"))
    assert internals.saves_sharded(ModelParallelStrategy())  # _save_distributed_checkpoint, True by default
    assert not internals.saves_sharded(ModelParallelStrategy(save_distributed_checkpoint=False))
    assert not internals.saves_sharded(DDPStrategy())
    # Lightning's saves: the same keys into `_distributed_checkpoint_save`, and meta.pt beside the shards.
    fsdp, model_parallel = (
        inspect.getsource(FSDPStrategy.save_checkpoint),
        inspect.getsource(ModelParallelStrategy.save_checkpoint),
    )
    assert 'converted_state = {"model": checkpoint.pop("state_dict")}' in fsdp
    assert 'converted_state = {"state_dict": checkpoint.pop("state_dict")}' in model_parallel
    for source in (fsdp, model_parallel):
        assert 'f"optimizer_{idx}": optim_state' in source
        assert 'checkpoint.pop("optimizer_states", [])' in source
        assert "torch.save(checkpoint, path / _METADATA_FILENAME)" in source
    checkpoint = {"state_dict": {"w": torch.zeros(1)}, "optimizer_states": [{"state": {}}], "epoch": 1}
    assert internals.sharded_state(FSDPStrategy(), dict(checkpoint)).keys() == {"model", "optimizer_0"}
    assert internals.sharded_state(ModelParallelStrategy(), checkpoint).keys() == {"state_dict", "optimizer_0"}
    assert checkpoint == {"epoch": 1}  # what goes to meta.pt
    # A folder with meta.pt is what Lightning's loads take for a sharded checkpoint, and what `runs` looks for.
    assert internals.SHARDED_METADATA == submodule("run.folders").SHARDED_METADATA == "meta.pt"
    (tmp_path / "meta.pt").write_bytes(b"")
    assert _is_sharded_checkpoint(tmp_path)
