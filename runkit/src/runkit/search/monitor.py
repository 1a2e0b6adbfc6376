"""Inside a trial's ``fit``: report the searched metric to Optuna each epoch, stop the trial when Optuna prunes it.

Written here rather than taken from ``optuna-integration``'s ``PyTorchLightningPruningCallback``: that raises
``TrialPruned`` from inside the training loop (no clean end of the run, no final events), keeps no best value,
and names no logged metrics when the metric is missing.
"""

from __future__ import annotations

import json
import math
import signal
import threading
from typing import Any, Literal

import lightning.pytorch as pl
import optuna
from lightning.pytorch.loggers import TensorBoardLogger

from ..safety.signals import STOP


class MetricNotLoggedError(ValueError):
    """The searched metric is not among the metrics the model logs."""


class TrialMonitor(pl.Callback):
    """Keeps the best value of ``metric`` over the validations, reports it to Optuna and prunes at epoch ends."""

    def __init__(
        self,
        trial: optuna.Trial,
        metric: str,
        direction: Literal["minimize", "maximize"],
        params: dict[str, Any],
        reported: dict[int, float],
    ) -> None:
        """Watches one trial.

        Args:
            trial: The Optuna trial this ``fit`` runs.
            metric: The logged validation metric the search optimizes (e.g. ``val/acc``).
            direction: Whether lower (``minimize``) or higher (``maximize``) is better.
            params: The trial's values by config key, written to TensorBoard's hparams view.
            reported: Values reported by the failed run this trial retries (it resumes from its ``last.ckpt``).
        """
        self.trial, self.metric, self.direction, self.params = trial, metric, direction, params
        self.reported = dict(reported)
        self.best: float | None = None
        for value in reported.values():
            self._keep(value)
        self.pruned = False
        self.exception: BaseException | None = None
        self._pending: float | None = None  # the newest validation value, reported at the end of its epoch
        # The worker's SIGTERM request (worker._StopRequest), which holds a SIGTERM until the fit installs its handler.
        self._requested: threading.Event | None = getattr(signal.getsignal(signal.SIGTERM), "requested", None)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # A SIGTERM that came after the worker took this trial and before the fit's handlers were in place (its
        # config parsed, its model built) stops it at its first step, saved, rather than after the whole run.
        if self._requested is not None and self._requested.is_set() and STOP.pending is None:
            STOP.pending = signal.SIGTERM

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            logged = ", ".join(sorted(trainer.callback_metrics)) or "none"
            raise MetricNotLoggedError(f"the searched metric {self.metric!r} is never logged; logged: {logged}")
        self._pending = float(value)
        self._keep(self._pending)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Steps are epochs, so pruners compare trials at equal epochs whatever their batch size.
        if self._pending is None or trainer.current_epoch in self.reported:
            return
        self.trial.report(self._pending, trainer.current_epoch)
        self.reported[trainer.current_epoch], self._pending = self._pending, None
        # After the last epoch there is nothing left to save: the trial completes, with its value.
        last = trainer.max_epochs is not None and trainer.current_epoch + 1 >= trainer.max_epochs > 0
        if not last and self.trial.should_prune():
            self.pruned = True
            trainer.should_stop = True  # ends the run cleanly after this epoch: checkpoints and events complete

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # TensorBoard's hparams view: the trial's values and its best metric, one row per trial.
        if trainer.is_global_zero and isinstance(trainer.logger, TensorBoardLogger) and self.best is not None:
            params = {key: value if _scalar(value) else json.dumps(value) for key, value in self.params.items()}
            trainer.logger.log_hyperparams({"trial": self.trial.number, **params}, {f"search/{self.metric}": self.best})

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.exception = exception  # Lightning turns Ctrl-C and SIGTERM into SystemExit; the worker needs which

    def _keep(self, value: float) -> None:
        if math.isnan(value):
            return
        if self.best is None or (value < self.best if self.direction == "minimize" else value > self.best):
            self.best = value


def _scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str))
