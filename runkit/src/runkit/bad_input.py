"""Bad input: one ``error:`` line naming the key, file or class and the problem, exit 2, and nothing written.

A value can be refused at four moments, and each ends the same way:

1. while the command line and config files are parsed: jsonargparse's multi-line type errors are condensed
   to one line (``OneLineErrorParser``), and a config file that is not a YAML mapping is named with the
   line and column of the problem (``config_files.py``);
2. while the configured classes are built: whatever a constructor raises (a ``ValueError``, Lightning's
   ``MisconfigurationException`` from the Trainer, a missing optional package) is about a configured value;
3. by the kit's checks of the Trainer, the paths and the task (``task_checks.py``) before the subcommand starts;
4. while the subcommand sets itself up, before its first batch: a DataLoader built with ``batch_size=0``
   in the user's ``train_dataloader``, an optimizer refusing its learning rate in ``configure_optimizers``.
   By then Lightning has opened the run's event file and saved its config: ``RunFiles`` takes back what
   this command added to the run directory.

The key is found by walking the traceback to the outermost frame of a configured object (the datamodule,
the model, a callback, the Trainer): ``data: SequenceData.train_dataloader (fixture_task.py:81): batch_size
should be a positive integer value, but got batch_size=0``. Errors raised once batches flow are bugs or data
problems, not input: they keep their traceback. ``JSONARGPARSE_DEBUG=1`` shows a refused value's traceback too.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import lightning.pytorch as pl
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.cli import LightningArgumentParser

from .safety.checkpoints import read_checkpoint
from .safety.data_checks import InvalidDataError
from .text import plain


class BadInputError(ValueError):
    """A value of the command line or config that cannot work; the message starts with its key."""


SETUP_ERRORS = (ValueError, TypeError, MisconfigurationException, FileNotFoundError, NotADirectoryError)
"""What the setup hooks raise for a bad value or path, before the first batch."""

# (config key, the objects it configures), first match wins: the data and the model before the callbacks
# and the Trainer that call into them.
OWNERS: tuple[tuple[str, type], ...] = (
    ("data", pl.LightningDataModule),
    ("model", pl.LightningModule),
    ("trainer.callbacks", Callback),
    ("trainer", pl.Trainer),
)


def condense(message: str) -> str:
    """jsonargparse's multi-line type error as one line: the key, then each specific reason.

    ``Parser key "seed_everything": Does not validate against any of the Union subtypes / Subtypes: [...] /
    Errors: - Expected a <class 'bool'> - Expected a <class 'int'> / Given value type: ... / Given value: abc``
    becomes ``seed_everything: expected bool or int; got 'abc'``. A message of another shape is returned as is.
    """
    lines = message.strip().splitlines()
    header = re.fullmatch(r'Parser key "([^"]+)":\s*(.*)', lines[0]) if lines else None
    if header is None or len(lines) == 1:
        return message
    given, reasons = None, []
    for line in [header[2], *lines[1:]]:
        text = line.strip()
        if text.startswith("Given value:"):
            given = text.removeprefix("Given value:").strip()
        elif text.startswith("- "):
            reasons.append(text[2:])
        elif text and not text.startswith(_NOISE) and reasons:
            reasons[-1] += " " + text  # a nested error's own lines
        elif text and not text.startswith(_NOISE):
            reasons.append(text)
    # `null` is accepted by every optional key: not a reason worth listing.
    reasons = [r for r in dict.fromkeys(reasons) if r != "Expected a <class 'NoneType'>" and not r.startswith(_NOISE)]
    if not reasons:
        return message
    if all(_EXPECTED_TYPE.fullmatch(r) for r in reasons) and given is not None:
        types = [_short_types(r.removeprefix("Expected a ")) for r in reasons]
        if all(t.startswith("typing.Literal[") for t in types):
            return f"{header[1]}: expected one of {', '.join(t[15:-1] for t in types)}; got {given!r}"
        got = "null" if given == "None" else repr(given)  # YAML's null (`--key null`), which jsonargparse calls None
        return f"{header[1]}: expected {' or '.join(types)}; got {got}{KEY_HINTS.get(header[1], '')}"
    return f"{header[1]}: {'; '.join(map(_short_types, reasons))}"


KEY_HINTS = {
    "seed_everything": ": an int seeds every run alike, true draws a seed and records it (provenance.yaml),"
    " false seeds nothing",
}
"""What to write instead, for keys whose refused value says too little on its own (``--seed_everything null``)."""


def _short_types(text: str) -> str:
    """``<class 'collections.abc.Iterable'>`` as ``Iterable``."""
    return re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)


_EXPECTED_TYPE = re.compile(r"Expected a (<class '[\w.]+'>|typing\.\w+\[.*\])")
_NOISE = ("Does not validate against any of the Union subtypes", "Subtypes:", "Errors:", "Given value type:")


def describe(error: BaseException, keys: dict[type, str] | None = None) -> str:
    """``<key>: <Class>[.<method>] (<file>:<line>): <message>``: where a refused value came from, and why.

    ``keys`` maps classes to their config key where it is not the default of ``OWNERS`` (e.g. the checkpoint
    callbacks, configured by their own keys).
    """
    lines = [line.strip() for line in plain(str(error)).strip().splitlines() if line.strip()]
    message = lines[0] if lines else type(error).__name__
    if isinstance(error, BadInputError):
        return message
    owner = _owner_frame(error.__traceback__, keys or {})
    if owner is None:
        return message
    key, instance, function, place = owner
    cls = type(instance)
    if key == "trainer":
        return f"{key}: {message}"
    if key == "data" and isinstance(error, OSError) and (folder := folder_argument(instance, message)):
        # The data's own files (a cache written with the kit's atomic_save): not a checkpoint, whatever it says.
        key, message = f"data.init_args.{folder}", message.replace("cannot write checkpoint ", "cannot write ", 1)
    where = cls.__name__ if function == "__init__" else f"{cls.__name__}.{function}"
    return f"{key}: {where} ({place}): {message}"


def folder_arguments(obj: object) -> dict[str, Path]:
    """The folders ``obj`` was configured with: its constructor's arguments named ``*_dir`` (``data_dir``,
    ``cache_dir``), as ``obj`` keeps them under the same name, when they are local paths."""
    found = {}
    for name in inspect.signature(type(obj).__init__).parameters:
        value = getattr(obj, name, None) if name.endswith("_dir") else None
        if isinstance(value, (str, os.PathLike)) and "://" not in str(value):
            found[name] = Path(value)
    return found


def folder_argument(obj: object, message: str) -> str | None:
    """The argument of ``folder_arguments`` whose folder ``message`` names a path in, or ``None``."""
    for name, folder in folder_arguments(obj).items():
        if str(folder) in message or str(folder.absolute()) in message:
            return name
    return None


def innermost_cause(error: BaseException) -> BaseException:
    """The exception at the bottom of a ``raise ... from`` chain: jsonargparse wraps a constructor's error in a
    ``ValueError`` that ends with a dump of the whole config."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def _owner_frame(traceback: TracebackType | None, keys: dict[type, str]) -> tuple[str, Any, str, str] | None:
    """The config key, object, function and ``file:line`` of the outermost frame in a configured object's method."""
    frames = []
    while traceback is not None:
        frames.append((traceback.tb_frame, traceback.tb_lineno))
        traceback = traceback.tb_next
    owners = [*((key, cls) for cls, key in keys.items()), *OWNERS]
    for key, cls in owners:
        for frame, line in frames:
            owner = frame.f_locals.get("self")
            if isinstance(owner, cls):
                return key, owner, frame.f_code.co_name, f"{Path(frame.f_code.co_filename).name}:{line}"
    return None


def refused_parse(config: Any) -> str | None:
    """What the parsed ``config`` of a subcommand has that cannot work, or ``None``: a seed out of range (Lightning
    raises a traceback), or a ``ckpt_path`` file that is broken or unsafe (LightningCLI reads a checkpoint file's
    hyperparameters right after parsing)."""
    seed = config.get("seed_everything")
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:
        return f"seed_everything must be in [0, {2**32 - 1}] (true: a random seed, false: none), got {seed}"
    ckpt_path = config.get("ckpt_path")
    if isinstance(ckpt_path, str) and Path(ckpt_path).is_file():
        try:
            read_checkpoint(ckpt_path)
        except ValueError as error:
            from .foreign_messages import without_unsafe_advice

            return without_unsafe_advice(str(error))
    return None


class OneLineErrorParser(LightningArgumentParser):
    """Lightning's parser, whose errors are the ``tip:`` and one ``error:`` line."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        from .foreign_messages import other_lightning, without_unsafe_advice  # only a refused command needs them

        message = without_unsafe_advice(condense(message))
        super().error(other_lightning(message) or message, ex)

    def print_usage(self, file: Any = None) -> None:
        """Prints nothing: argparse prints the usage above each error, ~60 lines that bury it; ``--help`` has it."""


class SetupPhase(Callback):
    """Tells whether the running command is still setting up (no batch yet) and whether it has trained."""

    def __init__(self) -> None:
        self.batches_started = False
        self.trained = False

    def refuses(self, error: Exception) -> bool:
        """Whether ``error``, raised by the running command, is bad input rather than a bug or bad data."""
        if isinstance(error, (BadInputError, MisconfigurationException)):
            return True
        if self.batches_started or isinstance(error, InvalidDataError):
            return False  # bad data has its own exit code; once batches flow, errors are the code's or the data's
        return isinstance(error, SETUP_ERRORS) or (isinstance(error, OSError) and _in_data_folder(error))

    def on_train_batch_start(self, *args: object) -> None:
        self.batches_started = self.trained = True

    def on_validation_batch_start(self, *args: object) -> None:
        self.batches_started = True

    def on_test_batch_start(self, *args: object) -> None:
        self.batches_started = True

    def on_predict_batch_start(self, *args: object) -> None:
        self.batches_started = True


def _in_data_folder(error: OSError) -> bool:
    """Whether ``error`` is the data module's, about a path in a folder it is configured with (its cache)."""
    owner = _owner_frame(error.__traceback__, {})
    return owner is not None and owner[0] == "data" and folder_argument(owner[1], str(error)) is not None


class RunFiles:
    """Takes back what a command refused while setting up has written into its run directory.

    A run directory that did not exist before the command is removed, with the parents made for it. In one
    that existed, only this process's TensorBoard event files are removed: another command may be writing there
    at the same time (a ``validate`` next to a running ``fit``), and a file that existed is never touched.
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.remote = "://" in str(run_dir)  # object storage: nothing to take back here
        self.run_dir = Path(run_dir).absolute()
        self.first_new = None if self.remote else next((p for p in _ancestors(self.run_dir) if not p.exists()), None)
        self.events = set() if self.remote else set(self.run_dir.glob(_own_events()))

    def restore(self) -> None:
        """Removes what was added since this object was made."""
        if self.remote:
            return
        if self.first_new is not None:
            shutil.rmtree(self.first_new, ignore_errors=True)
            return
        for path in set(self.run_dir.glob(_own_events())) - self.events:
            path.unlink(missing_ok=True)


def _own_events() -> str:
    """The pattern of this process's TensorBoard event files (TensorBoard names them by host and pid)."""
    return f"events.out.tfevents.*.{socket.gethostname()}.{os.getpid()}.*"


def _ancestors(path: Path) -> Iterable[Path]:
    """``path`` and its parents, outermost first."""
    path = path.absolute()
    return [*reversed(path.parents), path]
