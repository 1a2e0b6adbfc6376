"""The signals that stop a command, as clusters and terminals send them: recorded here, acted on at a safe point.

SIGTERM (a scheduler reclaiming the node, ``scancel``), SIGUSR1 (SLURM's ``--signal`` before the time limit),
SIGHUP (a closed terminal or a dropped SSH session) and SIGINT (Ctrl-C) arrive at any moment, often at every
process of the job at once (its process group: the DataLoader workers and the other ranks too). While a command
runs, ``StopSignals`` only records the first one; ``preemption.Preemption`` acts on it where the training state is
whole (the next optimizer step boundary, or after the current validation batch), on every rank at the same
step. A second Ctrl-C stops at once. ``worker_shield`` keeps the DataLoader workers alive meanwhile: a worker
killed by the job's signal would otherwise crash the run before it can save.

Each signal ends a command with the shell's code for it, ``128 + signal number``, and a status in the run's
provenance (``STOPS``). A signal that was ignored when the command started stays ignored, as the shell convention
has it: ``nohup`` ignores SIGHUP so that a closed terminal does not end the job, and a shell script's background
job (``&``) ignores SIGINT. ``ignored`` names them, for the one line the command line prints.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from . import worker_shield
from .stops import STOPS

# The one list of them: `stops.py` (the loader workers block the same ones).


INTERRUPTED_EXIT_CODE = 128 + signal.SIGINT  # 130: the shell's code for Ctrl-C
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM  # 143: the shell's code for "terminated by SIGTERM"


def exit_code(signum: int) -> int:
    """The shell's exit code for a command ended by ``signum``: 128 + its number."""
    return 128 + int(signum)


def signal_of(code: object) -> int | None:
    """The stop signal whose exit code is ``code``, or ``None``."""
    return next((signum for signum in STOPS if isinstance(code, int) and code == exit_code(signum)), None)


class Interrupted(SystemExit):
    """A second Ctrl-C: the command stops now, without saving, and exits 130."""

    def __init__(self) -> None:
        super().__init__(INTERRUPTED_EXIT_CODE)


class StopSignals:
    """Records the first stop signal a command receives; the safe points read it with ``pending``.

    One instance per process (``STOP``), installed by the command line around a command with ``installed()``.
    """

    def __init__(self) -> None:
        self.pending: int | None = None  # the first stop signal received while installed
        self.acted = False  # a safe point has acted on it (``consume``)
        self.ignored: list[str] = []  # stop signals ignored when the outermost block began, left so
        self._previous: dict[int, Any] = {}
        self._depth = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Installs the handlers (and the worker shield) for the block; nested blocks share them.

        A signal recorded but not acted on by the time the outermost block ends (it came after the last step)
        goes to the handler that was there before: a search worker between trials, for example, then stops.
        """
        main = threading.current_thread() is threading.main_thread()
        if main and self._depth == 0:
            self.pending, self.acted = None, False
            taken = [signum for signum in STOPS if signal.getsignal(signum) is not signal.SIG_IGN]
            self.ignored = [signal.Signals(signum).name for signum in STOPS if signum not in taken]
            self._previous = {signum: signal.signal(signum, self._record) for signum in taken}
        self._depth += 1
        try:
            with worker_shield.shielding():
                yield
        finally:
            self._depth -= 1
            if main and self._depth == 0:
                for signum, previous in self._previous.items():
                    signal.signal(signum, previous)
                unhandled = self.pending if not self.acted else None
                self.pending, self.acted = None, False
                handler = self._previous.get(unhandled) if unhandled is not None else None
                if callable(handler) and handler is not signal.default_int_handler:
                    handler(unhandled, None)

    def said_ignored(self) -> str | None:
        """The line that says which stop signals stay ignored, or ``None``."""
        if not self.ignored:
            return None
        ignored = " and ".join(self.ignored)
        return f"{ignored} ignored as this command started (nohup, or a background job): they will not stop it"

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.pending == signal.SIGINT:
            raise Interrupted()  # the second Ctrl-C
        if self.pending is None:
            self.pending = signum
            # os.write: print and logging are not safe inside a signal handler.
            again = "; Ctrl-C again stops at once, without saving" if signum == signal.SIGINT else ""
            os.write(2, f"\n{signal.Signals(signum).name}: stopping at the next safe point{again}\n".encode())

    def consume(self) -> int | None:
        """The pending signal, which a safe point now acts on (``None`` when there is none)."""
        self.acted = self.acted or self.pending is not None
        return self.pending


STOP = StopSignals()
"""This process's stop signals."""
