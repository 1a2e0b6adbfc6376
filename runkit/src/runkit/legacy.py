"""Names from before the kit was a library: ``<package>.kit.X`` resolves to ``runkit.X``.

Until runkit 0.1 every project carried the kit as its own subpackage, ``<package>.kit``. The runs such a project
made keep those class paths in their ``config.yaml``, their checkpoints' hyperparameters and their search studies
(``<package>.kit.WarmupCosine``). So that ``validate --ckpt_path best``, ``fit --ckpt_path last``, ``runs`` and
``search --resume`` keep working on them, the program's old ``kit`` subpackage is an alias of ``runkit`` (every
submodule too) when the project has none of its own. Deprecated: it warns once, and goes in runkit 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

LIBRARY = __package__ or "runkit"


class _OldKit(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``<prefix>`` and ``<prefix>.<sub>`` as ``runkit`` and ``runkit.<sub>``: the very same module objects."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.prefix and not fullname.startswith(f"{self.prefix}."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name}: a class path from before the kit was the runkit library; it reads as"
            f" {LIBRARY}{spec.name[len(self.prefix) :]} (new runs write that; the old name goes in runkit 0.3)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(LIBRARY + spec.name[len(self.prefix) :])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module is runkit's own, already run: only its ``__spec__``, which the import set to the alias's, is
        put back (its lazy relative imports and ``importlib.reload`` read it)."""
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


def alias_old_kit(program: str) -> None:
    """Makes ``<program>.kit`` an alias of runkit, unless the program has a ``kit`` of its own (once per prefix)."""
    prefix = f"{program}.kit"
    if program == LIBRARY or any(isinstance(f, _OldKit) and f.prefix == prefix for f in sys.meta_path):
        return
    try:
        spec = importlib.util.find_spec(prefix)
    except ModuleNotFoundError:
        return  # no such package at all
    if spec is not None and spec.origin is not None:
        return  # the project still carries its own kit
    # No kit, or a folder of the deleted one without its __init__.py (its __pycache__, which git leaves behind once
    # `cruft update` has deleted the files): Python would import that as an empty namespace package.
    sys.modules.pop(prefix, None)
    sys.meta_path.insert(0, _OldKit(prefix))  # first: its submodules too, not copies found on runkit's path


def current_names(value: Any) -> Any:
    """``value`` (a config, a checkpoint's hyperparameters: mappings, lists, strings) with every old class path
    ``<program>.kit.X`` of an aliased program written ``runkit.X``, the name runkit's classes are parsed to now.

    For comparing what a run made before saved with what a command asks for now (a resume's model, a search's
    study): the same class, otherwise named.
    """
    prefixes = tuple(f"{finder.prefix}." for finder in sys.meta_path if isinstance(finder, _OldKit))
    if isinstance(value, dict):
        return {key: current_names(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(current_names(item) for item in value)
    for prefix in prefixes if isinstance(value, str) else ():
        if value.startswith(prefix):
            return f"{LIBRARY}.{value[len(prefix) :]}"
    return value
