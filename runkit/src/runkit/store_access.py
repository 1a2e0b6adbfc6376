"""What a request to a run's store can meet, said in one line naming the root: a bucket that is not named or does
not exist (the kit creates none: s3fs's ``makedirs`` would make a misspelled one), no credentials (naming the
variables to set), a bucket name the client refuses, an endpoint that does not answer.

``check_root`` is a command's first request to the store, before anything is written; ``unreachable`` tells a lost
endpoint in an error raised later (``safety/lost_store.py``).
"""

from __future__ import annotations

import os
import re

from .store import BUCKETED, RunPath, StoreError, StorePath


def check_root(root: RunPath) -> None:
    """Raises ``StoreError`` (one line) where ``root`` is in a store whose bucket is not named or does not exist, or
    which cannot be reached: the first request a command makes to the store, before anything is written. The kit
    never creates a bucket: a misspelled name would get one."""
    if not isinstance(root, StorePath) or root.protocol not in BUCKETED:
        return
    bucket = root.url.partition("://")[2].split("/", 1)[0]  # `s3:///runs`: s3fs would take `runs` as the bucket
    if not bucket:
        raise StoreError(f"{root.url} names no bucket: {root.protocol}://<bucket>/<folder>")
    try:
        root.fs.info(bucket)
    except FileNotFoundError:
        raise StoreError(
            f"{root.url}: no bucket {bucket!r}{endpoint(root)}; create it (the kit creates none) or fix its name"
        ) from None
    except Exception as error:  # credentials, the endpoint, the name: the client's words, in one line
        raise StoreError(store_problem(error, root)) from None


def endpoint(root: StorePath) -> str:
    """`` at <endpoint URL>`` where the store's client was given one (an S3-protocol server), else ``""``."""
    url = getattr(root.fs, "endpoint_url", None) or (getattr(root.fs, "client_kwargs", None) or {}).get("endpoint_url")
    url = url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return f" at {url}" if url and root.protocol in ("s3", "s3a") else ""


CREDENTIALS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS",
    "az": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_CONNECTION_STRING)",
}
"""Where each store's client looks for credentials first: the environment variables a refusal names."""


def store_problem(error: BaseException, root: StorePath) -> str:
    """What went wrong with a request to the store of ``root``, in one line that names the root: the client's own
    text, whole (botocore's spans lines: ``Parameter validation failed:`` then the reason), with what to set where it
    found no credentials, and where the endpoint did not answer."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
    name = type(error).__name__
    if name == "NoCredentialsError" or "Unable to locate credentials" in text:
        protocol = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}.get(root.protocol, root.protocol)
        where = CREDENTIALS.get(protocol, "its client's settings")
        return f"{root.url}: no credentials for the store{endpoint(root)}: set {where} in the environment ({text})"
    if name == "ParamValidationError" and (bad := re.search(r'Invalid bucket name "([^"]*)"', text)):
        return f"{root.url}: {bad[1]!r} is not a bucket name (letters, digits, '.', '-', '_'; {text[:27]})"
    if unreachable(error) is not None:
        return f"{root.url}: the store{endpoint(root)} does not answer: {text}"
    return f"{root.url}: {text}"


def unreachable(error: BaseException | None) -> BaseException | None:
    """The error in ``error``'s chain that says a store's endpoint could not be reached (a refused or reset
    connection, a timeout, a name that does not resolve), or ``None``."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        names = {kind.__name__ for kind in type(error).__mro__}
        if names & {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError", "ConnectionError"}:
            return error
        error = error.__cause__ or error.__context__
    return None
