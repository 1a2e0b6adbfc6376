"""Fixtures for every test: runkit's pytest plugin (``runkit.testing.fixtures``: an empty working directory
``in_tmp``, Lightning's log, process-wide state put back, the ``gpu`` skip and ``--faults``).
"""

from __future__ import annotations

pytest_plugins = ["runkit.testing.fixtures"]
