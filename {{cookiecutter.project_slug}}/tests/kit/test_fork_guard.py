"""The fork guard: forks made while native threads create Python thread states never hang the child.

CPython before 3.10.15 and 3.11.10 deadlocks such a child (gh-112275); gloo's threads create thread states after
every DDP collective, so a DataLoader worker could hang as it started. ``STRESS`` makes the race as gloo does, on
purpose and often: native threads (started with ``pthread_create``) each run a Python callback while the main
thread forks children that exit at once. Without the guard this Python's child hangs within a few hundred forks
(``test_without_the_guard_the_same_forks_hang``, in ``make test-faults``).
"""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest
from support import PACKAGE, ROOT, submodule

GUARD = ROOT / "src" / PACKAGE / "kit" / "safety" / "fork_guard.py"
STRESS = """
import ctypes, importlib.util, os, sys, threading, time

forks, guarded = int(sys.argv[1]), sys.argv[2] == "guarded"
if guarded:  # the module alone, by its file: a small process forks fast
    spec = importlib.util.spec_from_file_location("fork_guard", sys.argv[3])
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
libc = ctypes.CDLL(None)
callback = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda arg: None)

def native_threads():  # each new native thread creates a thread state for the callback, as gloo's threads do
    while True:
        tid = ctypes.c_ulong()
        libc.pthread_create(ctypes.byref(tid), None, callback, None)
        libc.pthread_detach(tid)
        time.sleep(0.0002)

def fork_many(count):
    for number in range(1, count + 1):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        for _ in range(300):  # 3 s for a child that only exits
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            return f"the child of fork {number} of {count} hung"
    return f"{count} forks, none hung"

for _ in range(3):
    threading.Thread(target=native_threads, daemon=True).start()
print(fork_many(forks), flush=True)
pid = os.fork()  # a forked child forks in turn: the guard follows the lock that the child's Python made anew
if pid == 0:
    threading.Thread(target=native_threads, daemon=True).start()
    print("in a forked child:", fork_many(forks // 4), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""
NEEDS_GUARD = submodule("kit.safety.fork_guard").needs_guard()
HAS_THE_FIX = "this Python has CPython's fix for gh-112275: the guard installs nothing"


def stress(forks: int, *mode: str) -> list[str]:
    args = [sys.executable, "-W", "ignore", "-c", STRESS, str(forks), *mode]
    return subprocess.run(args, capture_output=True, text=True, timeout=600, check=True).stdout.splitlines()


def test_the_guard_is_installed_exactly_on_pythons_without_cpythons_fix() -> None:
    fork_guard: ModuleType = submodule("kit.safety.fork_guard")
    assert [fork_guard.needs_guard(v) for v in [(3, 10, 14), (3, 10, 15), (3, 11, 9), (3, 11, 10)]] == [
        True,
        False,
        True,
        False,
    ]
    assert not any(fork_guard.needs_guard(v) for v in [(3, 12, 0), (3, 13, 1), (3, 14, 0)])
    submodule("kit.command.cli")  # what every command imports
    assert fork_guard.installed() == (NEEDS_GUARD and sys.platform.startswith("linux"))


@pytest.mark.skipif(not NEEDS_GUARD, reason=HAS_THE_FIX)
def test_forks_under_the_race_do_not_hang_with_the_guard() -> None:
    assert stress(1000, "guarded", str(GUARD)) == ["1000 forks, none hung", "in a forked child: 250 forks, none hung"]


@pytest.mark.skipif(not NEEDS_GUARD, reason=HAS_THE_FIX)
def test_a_fork_that_c_code_calls_from_a_native_thread_passes_by() -> None:
    # The native thread has no thread state: the fork handlers' callbacks get one, and delete it at their end.
    script = f"""
import ctypes, importlib.util, os
spec = importlib.util.spec_from_file_location("fork_guard", {str(GUARD)!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
libc, tid = ctypes.CDLL(None), ctypes.c_ulong()
libc.pthread_create(ctypes.byref(tid), None, ctypes.cast(libc.fork, ctypes.c_void_p), None)
libc.pthread_join(tid, None)  # the child is that thread's copy: it ends when the thread does
print("child exited:", os.WIFEXITED(os.waitpid(-1, 0)[1]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout == "child exited: True\n", done.stderr


@pytest.mark.faults
@pytest.mark.skipif(not NEEDS_GUARD, reason=HAS_THE_FIX)
def test_without_the_guard_the_same_forks_hang() -> None:
    assert "hung" in stress(5000, "bare")[0]  # the race above is real on this Python: the guarded test can fail
