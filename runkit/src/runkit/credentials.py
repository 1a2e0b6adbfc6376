"""Credentials never reach a file a run writes: a URL's password is masked wherever a run records text.

Trackers and search storages take credentials from the environment (``MLFLOW_TRACKING_TOKEN``,
``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``, ``WANDB_API_KEY``) or from a URL
(``https://user:password@host``). A password given in a tracking URL is moved into the environment of this
process before anything is built (``move_url_credentials``), so the config, the saved ``config.yaml`` and the
tracker's own parameters hold the URL without it; the command line recorded in ``provenance.yaml`` is masked.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):(?P<password>[^/@\s]*)@")


def masked(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (``scheme://user:***@host``)."""
    return _USERINFO.sub(lambda match: f"{match['scheme']}{match['user']}:{MASK}@", text)


def without_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without ``user:password@``, and the user and password it held (``None`` where absent)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), parts.username, parts.password


def move_url_credentials(url: str | None, user_variable: str, password_variable: str) -> str | None:
    """``url`` without credentials; a user and password it held go to the environment variables named.

    The tracker's client reads them from there (MLflow: ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``).
    """
    if not url or "://" not in url:
        return url
    clean, user, password = without_userinfo(url)
    if user:
        os.environ[user_variable] = user
    if password:
        os.environ[password_variable] = password
    return clean
