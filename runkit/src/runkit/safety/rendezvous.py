"""Where the processes of a run meet: a multi-node run needs a launcher, and a stop signal ends the wait for the others.

``--trainer.num_nodes 2`` makes every process wait in ``torch.distributed.init_process_group`` until the world's
processes have joined. Lightning takes the node's rank from its launcher (torchrun, SLURM, LSF, MPI, Kubeflow) or from
``NODE_RANK`` set by hand on each node (with ``MASTER_ADDR``/``MASTER_PORT``); with none of them every node is node 0,
and the first one waits for a node that never comes (30 minutes, gloo's timeout). ``check_launcher`` refuses that in
one line before anything runs.

The wait itself is native code: Python runs no signal handler until it returns, so a SIGTERM or Ctrl-C there was
recorded and never acted on (issue 33: only SIGKILL ended it, after 749 s). ``stoppable_rendezvous`` watches the
stop signals from a thread while the processes meet (``signal.set_wakeup_fd``: the interpreter's C-level handler
writes each signal's number to a pipe at once): the first one ends the command with one line, its status recorded
and the shell's exit code. Nothing has trained then, so there is nothing to save. A line after
``WAIT_LINE_S`` says what the process waits for.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator

import lightning.pytorch as pl
from lightning.fabric.plugins.environments import LightningEnvironment

from ..bad_input import BadInputError
from ..lightning_internals import around_process_group_setup
from .signals import exit_code
from .stops import STOPS

WAIT_LINE_S = 10.0
"""After this many seconds of waiting for the other processes, one line says who waits for whom, and where."""


def check_launcher(trainer: pl.Trainer) -> None:
    """Refuses a multi-node run that no launcher started (see the module); makes the meeting of a run's processes
    end on a stop signal (``stoppable_rendezvous``)."""
    if trainer.num_nodes > 1 and _unlaunched(trainer):
        raise BadInputError(
            f"trainer.num_nodes: {trainer.num_nodes} nodes, but no launcher gave this process its node's rank (no"
            " torchrun, SLURM or NODE_RANK): every node would be node 0 and wait for the others forever; start each"
            f" node with torchrun --nnodes {trainer.num_nodes} (scripts/torchrun.sh) or srun, or set NODE_RANK,"
            " MASTER_ADDR and MASTER_PORT on each (docs/scale-out.md)"
        )
    if trainer.world_size > 1:
        around_process_group_setup(trainer, lambda: stoppable_rendezvous(trainer))


def _unlaunched(trainer: pl.Trainer) -> bool:
    environment = getattr(trainer.strategy, "cluster_environment", None)
    plain = environment is None or type(environment) is LightningEnvironment  # detected by nothing else
    return plain and not any(os.environ.get(name) for name in ("NODE_RANK", "GROUP_RANK"))


@contextlib.contextmanager
def stoppable_rendezvous(trainer: pl.Trainer) -> Iterator[None]:
    """While the block runs (the processes meet), the first stop signal ends the command: see the module."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can set the wakeup fd (a search trial in a thread is not distributed)
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    met = threading.Event()
    watcher = threading.Thread(target=_watch, args=(read, met, trainer), name="runkit-rendezvous-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        met.set()
        watcher.join()
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)


def _watch(read: int, met: threading.Event, trainer: pl.Trainer) -> None:
    waited = 0.0
    while not met.is_set():
        ready, _, _ = select.select([read], [], [], 0.2)
        if not ready:
            waited += 0.2
            if abs(waited - WAIT_LINE_S) < 0.1:
                _say(f"Waiting for the run's other processes: {_meeting(trainer)}; a stop signal ends the wait")
            continue
        for signum in os.read(read, 64):
            # Only a signal whose handler is the kit's reaches here as a stop (one ignored at start has none).
            if signum in STOPS and callable(signal.getsignal(signum)):
                _stop(trainer, signum)


def _meeting(trainer: pl.Trainer) -> str:
    """Who waits for whom, and where: this process's rank of the world, its node, the address they meet at."""
    address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '?')}"
    node = os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK") or "0"
    return (
        f"process {trainer.global_rank} of {trainer.world_size} (node {node} of {trainer.num_nodes}) waits at"
        f" {address} for the others to join"
    )


def _stop(trainer: pl.Trainer, signum: int) -> None:
    """Ends the command for a stop signal that came while the processes met: one line, the status, the exit code.

    The main thread is inside native code that does not return, so this thread ends the process (``os._exit``);
    the processes Lightning started on this node get the same signal, and end the same way."""
    code = exit_code(signum)
    name = signal.Signals(signum).name
    _say(f"{name}: stopped while {_meeting(trainer)}; nothing was trained, nothing to save; exit {code}")
    launcher = trainer.strategy.launcher
    if launcher is not None and hasattr(launcher, "kill"):
        with contextlib.suppress(Exception):
            launcher.kill(signum)
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        record = getattr(callback, "record", None)
        if record is not None and hasattr(record, "end_session"):
            with contextlib.suppress(Exception):
                record.end_session(SystemExit(code))
            break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _say(line: str) -> None:
    os.write(2, f"{line}\n".encode())
