"""Two sides measured in one process, step by step, taking turns: drift and bursts of other work hit both alike.

One side runs in the main thread (the project's ``fit``: its signal handlers need the main thread), the other in
a second thread. A baton lets exactly one of them run at a time: each side times its own steps from the moment
it gets the baton back to the end of its next step, so neither pays for the other. The second side sets up
first, alone; then the main side sets up, alone; then they alternate one step each. Each side keeps its own
global RNG state across the turns.

Steps are paired by index and grouped into repeats of whole logging periods. Within a repeat each side's cost
is the mean over the period's positions of the median step at that position (a logging step costs more than
the others, and a median over all steps would hide it; a median per position still ignores a burst of other
work). Each repeat gives one ratio and one difference: ``Paired`` holds them all, the table their median and
interquartile range.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch


class Baton:
    """Lets two named sides take turns; a side that has finished (or failed) lets the other run on alone."""

    def __init__(self, first: str, second: str) -> None:
        self._turn = threading.Condition()
        self._sides = (first, second)
        self._holder = first
        self._arrived: set[str] = set()
        self._done: set[str] = set()
        self.failed = False

    def _other(self, side: str) -> str:
        return self._sides[1] if side == self._sides[0] else self._sides[0]

    def wait(self, side: str) -> None:
        """Blocks until it is ``side``'s turn (or the other side is done)."""
        with self._turn:
            self._arrived.add(side)
            self._turn.notify_all()
            self._turn.wait_for(lambda: self._holder == side or self._other(side) in self._done or self.failed)
            if self.failed:
                raise RuntimeError("the other side of the comparison failed")

    def wait_arrived(self, side: str) -> None:
        """Blocks until ``side`` has set up and waits for its first turn (or is done)."""
        with self._turn:
            self._turn.wait_for(lambda: side in self._arrived or side in self._done)

    def pass_turn(self, side: str) -> None:
        with self._turn:
            self._holder = self._other(side)
            self._turn.notify_all()

    def finish(self, side: str, failed: bool = False) -> None:
        with self._turn:
            self._done.add(side)
            self._holder = self._other(side)
            self.failed = self.failed or failed
            self._turn.notify_all()


def _rng_state() -> tuple[Any, ...]:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _set_rng_state(state: tuple[Any, ...]) -> None:
    torch.set_rng_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


class Side:
    """One side's turns and record: ``start`` before its first step, ``step_done`` after each, ``finish`` at the end.

    ``pause`` and ``resume`` take time out of the current step (a validation pass inside ``fit``).
    """

    def __init__(self, baton: Baton, name: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.baton, self.name, self.clock = baton, name, clock
        self.durations: list[float] = []
        self.losses: list[float] = []
        self._start = 0.0
        self._paused = 0.0
        self._rng: tuple[Any, ...] | None = None

    def start(self) -> None:
        self._rng = _rng_state()  # the other side draws in between: each side continues its own stream
        self.baton.wait(self.name)
        self._resume_turn()

    def step_done(self, loss: torch.Tensor | float | None = None) -> None:
        self.durations.append(self.clock() - self._start)
        if loss is not None:
            self.losses.append(float(loss))
        self._rng = _rng_state()
        self.baton.pass_turn(self.name)
        self.baton.wait(self.name)
        self._resume_turn()

    def pause(self) -> None:
        self._paused = self.clock()

    def resume(self) -> None:
        self._start += self.clock() - self._paused

    def finish(self, failed: bool = False) -> None:
        self.baton.finish(self.name, failed)

    def _resume_turn(self) -> None:
        if self._rng is not None:
            _set_rng_state(self._rng)
        self._start = self.clock()


class Paced(pl.Callback):
    """Makes a Lightning ``fit`` one side of an alternation: one training batch per turn, validation not timed."""

    def __init__(self, side: Side) -> None:
        self.side = side

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.side.start()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.side.step_done(outputs["loss"])

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.side.pause()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.side.resume()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.side.finish()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.side.finish(failed=True)


def alternate(
    main: Callable[[Side], Any],
    other: Callable[[Side], Any],
    names: tuple[str, str] = ("candidate", "baseline"),
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[Side, Side]:
    """Runs ``main(side)`` in this thread and ``other(side)`` in a second one, one step each in turn.

    Each callable sets up, calls ``side.start()``, then ``side.step_done()`` after every step (``Paced`` does
    both for a ``fit``). ``other`` sets up first, then ``main``, each alone. ``clock``: wall time by default;
    ``time.thread_time`` counts only the CPU time of the side's own thread, which other work on the machine
    does not change (for steps too small for PyTorch's worker threads).
    """
    baton = Baton(names[0], names[1])
    first, second = Side(baton, names[0], clock), Side(baton, names[1], clock)
    errors: list[BaseException] = []

    def run_other() -> None:
        try:
            other(second)
        except BaseException as error:
            errors.append(error)
            second.finish(failed=True)
        else:
            second.finish()

    thread = threading.Thread(target=run_other, name=f"bench-{names[1]}", daemon=True)
    thread.start()
    baton.wait_arrived(second.name)
    try:
        main(first)
    except BaseException:
        first.finish(failed=True)
        thread.join()
        if errors:  # the other side failed first: its error is the one to show
            raise errors[0] from None
        raise
    finally:
        first.finish()
        thread.join()
    if errors:
        raise errors[0]
    return first, second


@dataclass
class Paired:
    """Per-repeat step costs (s) of both sides, and their ratios and differences (candidate vs baseline)."""

    candidate: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        return [c / b for c, b in zip(self.candidate, self.baseline, strict=True)]

    @property
    def differences_ms(self) -> list[float]:
        return [1e3 * (c - b) for c, b in zip(self.candidate, self.baseline, strict=True)]

    def median_ms(self, side: str) -> float:
        return 1e3 * statistics.median(getattr(self, side))


def robust_mean(durations: list[float], period: int) -> float:
    """Mean step over a whole number of periods: the mean over positions of each position's median."""
    positions = [durations[start::period] for start in range(period)]
    return statistics.fmean(statistics.median(values) for values in positions)


def paired(candidate: Side, baseline: Side, warmup: int, period: int, repeat_periods: int) -> Paired:
    """Groups both sides' steps after ``warmup`` into repeats of ``repeat_periods`` logging periods."""
    steps = min(len(candidate.durations), len(baseline.durations))
    size = period * repeat_periods
    result = Paired()
    for start in range(warmup, steps - size + 1, size):
        result.candidate.append(robust_mean(candidate.durations[start : start + size], period))
        result.baseline.append(robust_mean(baseline.durations[start : start + size], period))
    if not result.candidate:
        raise ValueError(f"{steps} steps leave no repeat of {size} after a warmup of {warmup}")
    return result
