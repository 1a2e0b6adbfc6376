"""``<package> sweep``: every combination of presets and values, one command, one table (``sweep_command.py``).

    <package> sweep -c configs/debug/tiny.yaml --grid configs/example/model.yaml,configs/example/transformer.yaml \
        --grid seed_everything=1,2 --workers 2

Built on the search's machinery (Optuna's ``GridSampler``, the search's workers and storage): it needs the project's
``search`` extra too.
"""

from __future__ import annotations

import importlib.util
import sys

from ..project import Project


def main(args: list[str], project: Project | None = None) -> None:
    """Runs ``<package> sweep *args`` and exits with its code."""
    if importlib.util.find_spec("optuna") is None:
        print(
            "error: `sweep` needs Optuna: pip install the project's `search` extra (pip install -e '.[search]')",
            file=sys.stderr,
        )
        sys.exit(2)
    from .sweep_command import main as sweep

    sweep(args, project or Project())
