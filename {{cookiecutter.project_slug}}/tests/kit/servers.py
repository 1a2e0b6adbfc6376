"""Servers the kit's tests start for themselves on loopback ports: PostgreSQL (search studies, MLflow's store)
and an MLflow tracking server (the trackers' tests)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ROOT

MLFLOW_SERVER_ENV = "MLFLOW_SERVER"
"""The ``mlflow`` command of an environment with the tracking server (``make mlflow-server`` builds one in
``.venv-mlflow``; the template repository's ``make setup`` too, and its ``make test`` sets this variable)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A PostgreSQL server of its own on a free loopback port, as an unprivileged user; its URL (skips without one)."""
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))), None)
    if found is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin")
    bin_dir = Path(found).resolve().parent
    pytest.importorskip("psycopg", reason="the PostgreSQL driver comes with the `search` extra")
    # PostgreSQL refuses to run as root: run it as `nobody` in a folder of its own.
    as_user: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="kit-pg-"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without `runuser` to start PostgreSQL as another user")
        as_user = ["runuser", "-u", "nobody", "--"]
        os.chown(data, 65534, 65534)
    port = free_port()
    run = dict(check=True, capture_output=True, timeout=120)
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data / "db"), "-U", "postgres", "-A", "trust"], **run)
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    pg_ctl = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data / "db")]
    subprocess.run([*pg_ctl, "-o", options, "-l", str(data / "server.log"), "-w", "start"], **run)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


def mlflow_server_command() -> str:
    """The ``mlflow`` that can serve: ``$MLFLOW_SERVER``, else the project's ``.venv-mlflow``; fails without one.

    The server runs from an environment of its own, as a team's server runs apart from its training jobs: the
    full ``mlflow`` package would bring scipy, scikit-learn and pandas into the project's environment.
    """
    for candidate in (os.environ.get(MLFLOW_SERVER_ENV), str(ROOT / ".venv-mlflow" / "bin" / "mlflow")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail(
        f"no MLflow server to test the `mlflow` extra against: run `make mlflow-server` (builds .venv-mlflow from"
        f" scripts/mlflow-server.txt) or set ${MLFLOW_SERVER_ENV} to the `mlflow` command of such an environment"
    )


@contextlib.contextmanager
def mlflow_server(store: str | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``mlflow server`` on a free loopback port: its URL and process. ``store``: a database URL (default: SQLite
    in a folder of its own, which also holds the artifact root)."""
    folder = Path(tempfile.mkdtemp(prefix="kit-mlflow-"))
    port = free_port()
    store = store or f"sqlite:///{folder / 'mlflow.db'}"
    command = [mlflow_server_command(), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    # gunicorn serves MLflow's Flask app; its default, uvicorn, also serves the AI gateway, which imports pandas.
    command += ["--gunicorn-opts", "--log-level warning", "--backend-store-uri", store]
    command += ["--artifacts-destination", str(folder / "artifacts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no background job runner
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server did not start:\n{(folder / 'server.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield url, process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        process.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
