"""The store of a run lost mid-run (its endpoint gone, the network cut): one line, not a traceback.

Every writer of the run meets it on its own: TensorBoard's writer thread, the checkpoint upload, the lock's refresh,
then the record of the session's end, each with botocore's and aiohttp's stacks (274 lines and 4 tracebacks, no
``error:`` line). The first error that reaches the command ends it here, with one line; writers' threads stay quiet
(the command's line says it). Nothing more can be written to the store: the record is not updated, and each
checkpoint there is whole or absent (a write to a store is one request).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator

from ..store import RunPath, StorePath
from ..store_access import endpoint, unreachable


def lost_store(directory: RunPath, error: BaseException, subcommand: str) -> str | None:
    """The ``error:`` line's text when ``error`` means the store of the run in ``directory`` stopped answering,
    else ``None``."""
    if not isinstance(directory, StorePath) or (cause := unreachable(error)) is None:
        return None
    try:  # a write lost once (a reset upload) on a store that answers: the run ends as for any failed save
        directory.exists()
        return None
    except Exception:  # whatever the client raises: the store does not answer
        pass
    text = " ".join(str(cause).split()) or type(cause).__name__
    return (
        f"{directory}: the store{endpoint(directory)} stopped answering while {subcommand} ran ({text}); nothing"
        " more could be saved there, the run's record not updated; each checkpoint saved before is there whole:"
        " continue with --ckpt_path last once the store answers"
    )


def exit_if_store_lost(directory: RunPath, error: BaseException, subcommand: str, release: Callable[[], None]) -> None:
    """Exits 1 with one ``error:`` line when ``error`` means the run's store stopped answering; ``release`` (the
    run's lock) is tried first, its own failure ignored: the store cannot take it."""
    if (line := lost_store(directory, error, subcommand)) is None:
        return
    with contextlib.suppress(Exception):
        release()
    sys.stderr.write(f"error: {line}\n")
    raise SystemExit(1)


def quiet_when_store_lost(args: threading.ExceptHookArgs) -> bool:
    """Whether a thread's error is the store going away (TensorBoard's writer, the lock's refresh): the command says
    so in one line, so the thread's traceback is not printed (for ``threading.excepthook``)."""
    return unreachable(args.exc_value) is not None


def threads_quiet_when_store_lost() -> contextlib.AbstractContextManager[None]:
    """While the command runs: a writer thread's error that is the store going away prints nothing (see above)."""
    return threads_quiet(quiet_when_store_lost)


@contextlib.contextmanager
def threads_quiet(quiet: Callable[[threading.ExceptHookArgs], bool]) -> Iterator[None]:
    """While the context runs, an error raised in a thread that ``quiet`` accepts prints nothing (a line of the
    command's says it); any other goes to the hook there was."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if not quiet(args):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous
