"""Loader workers start where they cannot hang: under DDP on a CPython whose ``fork()`` can hang the child
(gh-112275, before 3.10.15 and 3.11.10), from a fork server (``kit/safety/worker_start.py``).

``STRESS`` makes the race that hangs such a fork, on purpose and often: native threads (started with
``pthread_create``) each run a Python callback, creating a thread state as gloo's threads do after every collective,
while the main thread starts children. Started by ``os.fork()``, a child hangs within a few thousand
(``test_the_race_hangs_a_bare_fork``, in ``make test-faults``: it shows the race is real here); started from the
fork server, none does. ``test_ddp.py`` checks that a 2-process run's loaders start so, and the fault matrix that
its workers still outlive the job's stop signals.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import fixture_task
import pytest
import torch
from support import submodule
from torch.utils.data import DataLoader

worker_start = submodule("safety.worker_start")
CAN_HANG = worker_start.fork_can_hang()
HAS_THE_FIX = "this Python has CPython's fix for gh-112275: workers fork as usual"
STRESS = """
import ctypes, multiprocessing, os, signal, sys, threading, time

starts, how = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None)
callback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda arg: None)

def native_threads():  # each new native thread creates a thread state for the callback, as gloo's threads do
    while True:
        tid = ctypes.c_ulong()
        libc.pthread_create(ctypes.byref(tid), None, callback, None)
        libc.pthread_detach(tid)
        time.sleep(0.0002)

def start_bare():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return lambda: os.waitpid(pid, os.WNOHANG)[0] != 0, lambda: os.kill(pid, signal.SIGKILL)

def start_from_server(context):
    process = context.Process(target=int)
    process.start()
    return lambda: process.exitcode is not None, process.kill

if __name__ == "__main__":
    if how == "server":  # the kit's fork server, as a rank under DDP starts it
        context = __import__(f"{sys.argv[3]}.safety.worker_start", fromlist=["fork_server"]).fork_server()
    for _ in range(3):
        threading.Thread(target=native_threads, daemon=True).start()
    for number in range(1, starts + 1):
        done, kill = start_bare() if how == "bare" else start_from_server(context)
        for _ in range(1000):  # 10 s for a child that only exits
            if done():
                break
            time.sleep(0.01)
        else:
            kill()  # a hung child holds this script's output pipe open: the test would wait for it
            print(f"the child of start {number} of {starts} hung", flush=True)
            os._exit(1)
    print(f"{starts} starts, none hung", flush=True)
    os._exit(0)
"""


MARKED_TASK = """
import os, torch

IMPORTED_BY = os.getpid()

class Pids(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.tensor([IMPORTED_BY, os.getpid()])
"""
WORKER_PIDS = """
import multiprocessing.forkserver, sys, torch
from torch.utils.data import DataLoader, Subset
from marked_task import Pids
from runkit.safety.worker_start import start_safely

loader = start_safely(DataLoader(Subset(Pids(), range(4)), batch_size=1, num_workers=2), world_size=2)
pids = torch.cat(list(loader)).tolist()
print(multiprocessing.forkserver._forkserver._forkserver_pid, *(pid for pair in pids for pid in pair))
"""


def stress(starts: int, how: str, *extra: str) -> str:
    args = [sys.executable, "-W", "ignore", "-c", STRESS, str(starts), how, *extra]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    return done.stdout.strip() or done.stderr[-2000:]


def test_a_fork_can_hang_exactly_on_pythons_without_cpythons_fix() -> None:
    versions = [(3, 10, 14), (3, 10, 15), (3, 11, 9), (3, 11, 10), (3, 12, 0), (3, 13, 1), (3, 14, 0)]
    assert [worker_start.fork_can_hang(v) for v in versions] == [True, False, True, False, False, False, False]


def loader(**settings: Any) -> DataLoader:
    return DataLoader(torch.arange(8.0), batch_size=2, **settings)


def test_only_loaders_with_workers_under_ddp_and_no_start_method_of_their_own_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_start, "fork_can_hang", lambda: True)
    monkeypatch.setattr(worker_start, "fork_server", lambda modules=(): "the fork server")
    monkeypatch.setattr(DataLoader, "multiprocessing_context", None)  # a plain attribute: nothing starts here
    workers, none, spawn = loader(num_workers=2), loader(), loader(num_workers=2)
    spawn.multiprocessing_context = "spawn"
    assert worker_start.start_safely({"a": workers, "b": [none, spawn]}, world_size=2)["a"] is workers
    assert [workers.multiprocessing_context, none.multiprocessing_context, spawn.multiprocessing_context] == [
        "the fork server",
        None,
        "spawn",
    ]
    alone = loader(num_workers=2)
    worker_start.start_safely(alone, world_size=1)
    assert alone.multiprocessing_context is None
    monkeypatch.setattr(worker_start, "fork_can_hang", lambda: False)
    worker_start.start_safely(alone, world_size=2)
    assert alone.multiprocessing_context is None


def test_the_server_imports_the_modules_of_what_the_workers_unpickle() -> None:
    class Wrapper(torch.utils.data.Dataset):
        def __init__(self, dataset: Any) -> None:
            self.dataset, self.datasets = dataset, ["not a dataset", torch.utils.data.TensorDataset(torch.ones(2))]

    task = fixture_task.Sequences(torch.ones(2, 3), torch.ones(2, 1), False)
    dataset = Wrapper(torch.utils.data.Subset(task, [0]))
    wrapped = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=stress, worker_init_fn=print)
    assert worker_start.preloaded([wrapped, loader(num_workers=2)]) == [
        __name__,  # the wrapper's, and the collate function's
        "torch.utils.data.dataset",  # TensorDataset and Subset (not the string in the list)
        "fixture_task",
        "torch",  # a tensor as the dataset, and torch's own collate function
        "torch.utils.data._utils.collate",
    ]


@pytest.mark.skipif(not CAN_HANG or not sys.platform.startswith("linux"), reason=HAS_THE_FIX)
def test_workers_under_ddp_find_the_datasets_module_imported_by_the_fork_server(tmp_path: Path) -> None:
    (tmp_path / "marked_task.py").write_text(MARKED_TASK)
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", WORKER_PIDS], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    server, *pairs = map(int, done.stdout.split())
    imported_by, workers = set(pairs[0::2]), set(pairs[1::2])
    assert imported_by == {server}, "each worker imported the dataset's module again"
    assert len(workers) == 2
    assert server not in workers


@pytest.mark.skipif(not CAN_HANG or not sys.platform.startswith("linux"), reason=HAS_THE_FIX)
def test_children_of_the_fork_server_do_not_hang_under_the_race() -> None:
    assert stress(300, "server", "runkit") == "300 starts, none hung"


@pytest.mark.faults
@pytest.mark.skipif(not CAN_HANG or not sys.platform.startswith("linux"), reason=HAS_THE_FIX)
def test_the_race_hangs_a_bare_fork() -> None:
    assert "hung" in stress(5000, "bare")  # the race is real on this Python: the test above can fail
