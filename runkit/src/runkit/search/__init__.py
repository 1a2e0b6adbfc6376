"""Hyperparameter search: ``<package> search`` runs many ``fit`` trials of one config, with values chosen by Optuna.

    <package> search -c configs/example/search.yaml --trials 20 --workers 2

Files: ``command.py`` (the command and its settings), ``space.py`` (the space and its checks), ``worker.py`` (the
loop that runs trials), ``trial.py`` (one trial as a ``fit``), ``monitor.py`` (reporting and pruning inside a
trial), ``storage.py`` (journal file or database, heartbeats, retries), ``report.py`` (progress, table, preset).
Needs the project's ``search`` extra (Optuna; a database driver such as psycopg2 for PostgreSQL).
"""

from __future__ import annotations

import importlib.util
import sys

from ..project import Project


def main(args: list[str], project: Project | None = None) -> None:
    """Runs ``<package> search *args`` and exits with its code."""
    if importlib.util.find_spec("optuna") is None:
        print(
            "error: `search` needs Optuna: pip install the project's `search` extra (pip install -e '.[search]')",
            file=sys.stderr,
        )
        sys.exit(2)
    from .command import main as search

    search(args, project or Project())
