"""A fork while a native thread creates its Python thread state no longer deadlocks the child, on any Python.

CPython before 3.10.15 and 3.11.10 takes its runtime's thread-list lock in the child of ``fork()`` before it resets
that lock (CPython gh-112275). If another thread held it at the fork, the child hangs inside ``os.fork()`` before
any of its own code runs. Native threads take that lock, without the GIL, whenever they create a thread state to
touch a Python object: gloo's threads do so after every DDP collective, to drop a tensor's Python object. So under
DDP, a DataLoader worker could hang as it started, and the run with it (measured: 1 of 72 two-process fault-matrix
cells). CPython's own fix is not available on those Pythons; ``install()`` holds the lock across every
``os.fork()`` instead, from C's fork handlers (after Python's own, right around the system call), and releases it
in the parent and in the child (a ``fork()`` that C code calls passes by). On Pythons with the fix it installs
nothing.

It reads a CPython internal: where the lock lies in ``_PyRuntime``, per minor version (``MUTEX_OFFSET``, checked
with gdb against 3.10.13 and 3.11.7); tests/kit/test_fork_guard.py forks under the race with the guard. Delete this
file when the project's Python floor passes 3.11.10.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import partial

MUTEX_OFFSET = {(3, 10): 24, (3, 11): 32}  # offsetof(_PyRuntimeState, interpreters.mutex)
FIXED_IN = {(3, 10): 15, (3, 11): 10}  # the first patch release of each minor version with CPython's fix

_handlers: list[ctypes._CFuncPtr] = []  # kept alive: C holds pointers to them
_lock = ctypes.c_void_p()  # what the handlers take: the thread-list lock during os.fork(), else a lock of our own


def needs_guard(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this CPython version deadlocks a child forked while another thread creates its thread state."""
    minor = tuple(version[:2])
    return minor in FIXED_IN and version[2] < FIXED_IN[minor]


def installed() -> bool:
    """Whether this process forks with the guard."""
    return bool(_handlers)


def install() -> bool:
    """Holds the thread-list lock across every ``os.fork()`` of this process, where this Python needs it."""
    if _handlers or not needs_guard() or sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        return installed()
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    slot = ctypes.c_void_p.from_address(runtime + MUTEX_OFFSET[sys.version_info[:2]])  # read at each fork
    own = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyThread_allocate_lock", ctypes.pythonapi))()
    # Armed by os.fork() only (Python's fork hooks run with the GIL held). A fork() called from C by a thread with no
    # thread state takes a lock of our own instead: its handler ends by deleting the thread state it was given, which
    # takes the thread-list lock.
    os.register_at_fork(
        before=lambda: setattr(_lock, "value", slot.value),
        after_in_parent=lambda: setattr(_lock, "value", own),
        after_in_child=lambda: setattr(_lock, "value", own),
    )
    _lock.value = own
    # The handlers call C directly (partial objects, no Python bytecode): bytecode could hand the GIL to a thread that
    # then waits for the lock while the handler waits for the GIL. The forking thread holds the GIL, so no thread
    # that holds the GIL can be waiting for the lock when the handler takes it.
    acquire = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)(("PyThread_acquire_lock", ctypes.pythonapi))
    release = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("PyThread_release_lock", ctypes.pythonapi))
    handler = ctypes.CFUNCTYPE(None)
    _handlers[:] = [
        handler(partial(acquire, _lock, 1)),
        handler(partial(release, _lock)),
        handler(partial(release, _lock)),
    ]
    libc = ctypes.CDLL(None)
    if hasattr(libc, "pthread_atfork"):  # musl
        registered = libc.pthread_atfork(*_handlers)
    else:  # glibc links pthread_atfork statically into programs; this is what it calls (no DSO: never unregistered)
        registered = libc.__register_atfork(*_handlers, None)
    if registered != 0:
        _handlers.clear()
    return installed()


install()
