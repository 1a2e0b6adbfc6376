"""One export at a time writes a folder: two exports into one ``output_dir`` at the same moment each staged their
files, then moved them in, and one's files were gone while both said they succeeded.

The lock is a file beside the folder (``.<folder>.lock``: the folder itself is replaced whole), taken as a run's lock
is (``run/lock.py``: created exclusively, naming the host and process; a holder that died is taken over). The second
export is refused in one line naming the first.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from ..bad_input import BadInputError
from ..run.lock import RunLock, RunLockedError


class ExportLock:
    """Held while an export checks, writes and moves its folder ``destination`` into place."""

    def __init__(self, destination: Path) -> None:
        destination = destination.absolute()
        self.lock = RunLock(destination.parent)
        self.lock.path = destination.with_name(f".{destination.name}.lock")
        self.destination = destination

    def __enter__(self) -> ExportLock:
        self.destination.parent.mkdir(parents=True, exist_ok=True)  # checked writable by check_export_dir
        try:
            self.lock.acquire()
        except RunLockedError as error:
            holder = str(error).partition(" is being written by ")[2].partition(":")[0]
            raise BadInputError(
                f"output_dir: {self.destination} is being written by another export ({holder}): wait for it to"
                " end, then pass --overwrite true to replace it, or give another --output_dir"
            ) from None
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None):
        self.lock.release()
