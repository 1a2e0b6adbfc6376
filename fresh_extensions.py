"""The first of cookiecutter.json's ``_extensions``: every rendering reads this template's own local_extensions.py.

``cruft update`` renders the project's old template, then the new one, in one Python process and from one clone
whose files it checks out in between. Python keeps the first ``local_extensions`` module it imports, the old
template's, so the new cookiecutter.json's filters were looked up in it: from a template without
``runkit_requirement`` the update failed (``AttributeError: module 'local_extensions' has no attribute
'runkit_requirement'``), and a filter that changed would have rendered the new files the old way. Cookiecutter
makes a Jinja environment for each rendering, which builds this extension first: it forgets the module imported
before, so the filters listed after it come from the files checked out now.
"""

from __future__ import annotations

import sys

from jinja2 import Environment
from jinja2.ext import Extension

STALE = "local_extensions"
"""The module of the filters that follow this extension in ``_extensions``."""


class FreshExtensions(Extension):
    """Adds nothing to the environment; drops ``local_extensions`` from the modules imported so far."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        sys.modules.pop(STALE, None)
