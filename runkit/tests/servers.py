"""Servers the kit's tests start for themselves on loopback ports: PostgreSQL (search studies, MLflow's store),
an MLflow tracking server (the trackers' tests) and an S3-protocol server (moto's: runs in object storage)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support import REPO

MLFLOW_SERVER_ENV = "MLFLOW_SERVER"
"""The ``mlflow`` command of an environment with the tracking server (``make mlflow-server`` builds one in
``.venv-mlflow``; the template repository's ``make setup`` too, and its ``make test`` sets this variable)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def postgres_binaries() -> Path | None:
    """The folder of PostgreSQL's ``initdb`` and ``pg_ctl``, where they are on the machine."""
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))), None)
    return None if found is None else Path(found).resolve().parent


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A PostgreSQL server of its own on a free loopback port, as an unprivileged user; its URL (skips without one)."""
    bin_dir = postgres_binaries()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin")
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


def mlflow_server_found() -> str | None:
    """The ``mlflow`` that can serve: ``$MLFLOW_SERVER``, else the project's ``.venv-mlflow`` (``None``: neither).

    The server runs from an environment of its own, as a team's server runs apart from its training jobs: the
    full ``mlflow`` package would bring scipy, scikit-learn and pandas into the project's environment.
    """
    for candidate in (os.environ.get(MLFLOW_SERVER_ENV), str(REPO / ".venv-mlflow" / "bin" / "mlflow")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def mlflow_server_command() -> str:
    """The ``mlflow`` that can serve (``mlflow_server_found``); fails, saying how to get one, without."""
    found = mlflow_server_found()
    if found is None:
        pytest.fail(
            f"no MLflow server to test the `mlflow` extra against: run `make mlflow-server` (builds .venv-mlflow from"
            f" scripts/mlflow-server.txt) or set ${MLFLOW_SERVER_ENV} to the `mlflow` command of such an environment"
        )
    return found


@dataclass
class MlflowServer:
    """An ``mlflow server`` process, perhaps still starting: ``url()`` waits until it answers."""

    address: str
    process: subprocess.Popen[bytes]
    log: Path

    def url(self, timeout: float = 120) -> str:
        """The server's URL, once it answers ``/health`` (fails with its log if it exits or times out)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.address}/health", timeout=2) as answer:
                if answer.status == 200:
                    return self.address
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)


@contextlib.contextmanager
def mlflow_server(store: str | None = None) -> Iterator[MlflowServer]:
    """``mlflow server`` on a free loopback port, started and not waited for: start it early, call ``url()`` when
    needed (it boots in ~5 s of CPU, beside other work). ``store``: a database URL (default: SQLite in a folder of
    its own, which also holds the artifact root)."""
    folder = Path(tempfile.mkdtemp(prefix="kit-mlflow-"))
    port = free_port()
    store = store or f"sqlite:///{folder / 'mlflow.db'}"
    command = [mlflow_server_command(), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    # gunicorn serves MLflow's Flask app alone and starts sooner; its default, uvicorn, also serves the AI gateway.
    command += ["--gunicorn-opts", "--log-level warning", "--backend-store-uri", store]
    command += ["--artifacts-destination", str(folder / "artifacts")]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no background job runner
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield MlflowServer(f"http://127.0.0.1:{port}", process, folder / "server.log")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        process.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


MOTO_SERVER_ENV = "MOTO_SERVER"
"""The ``moto_server`` command of an environment with moto's server (``.venv-moto``, built by the template repository's
``make setup`` from ``tests/moto-server.txt``; its ``make test`` sets this variable)."""


def moto_server_command() -> str:
    """The ``moto_server`` to start: ``$MOTO_SERVER``, else the repository's ``.venv-moto``; fails, saying how to get
    one, without."""
    for candidate in (os.environ.get(MOTO_SERVER_ENV), str(REPO / ".venv-moto" / "bin" / "moto_server")):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail(
        f"no S3 server to test runs in object storage against: run `make setup` (builds .venv-moto from"
        f" runkit/tests/moto-server.txt) or set ${MOTO_SERVER_ENV} to the `moto_server` command of such an environment"
    )


@dataclass
class S3Server:
    """A running S3-protocol server: the environment a client needs to reach it (credentials and endpoint, as a
    team's job gets them), and the bucket made for the tests."""

    env: dict[str, str]
    bucket: str
    secret: str  # the secret access key: no file of a run may hold it
    log: Path  # the server's log: a line per request


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on a free loopback port, with a bucket, once it answers (fails with its log otherwise)."""
    folder = Path(tempfile.mkdtemp(prefix="kit-moto-"))
    port = free_port()
    command = [moto_server_command(), "-H", "127.0.0.1", "-p", str(port)]
    with open(folder / "server.log", "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    secret = f"kit-secret-{os.getpid()}-{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "kit-test-key",
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{env['AWS_ENDPOINT_URL']}/", timeout=2):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"moto_server did not answer:\n{(folder / 'server.log').read_text()[-3000:]}")
            time.sleep(0.1)
        bucket = "kit-runs"
        request = urllib.request.Request(f"{env['AWS_ENDPOINT_URL']}/{bucket}", method="PUT")  # moto signs nothing
        urllib.request.urlopen(request, timeout=10).close()
        yield S3Server(env, bucket, secret, folder / "server.log")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        process.wait(30)
        shutil.rmtree(folder, ignore_errors=True)


_PROXY = """
import socket, sys, threading
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
def pump(source, sink):
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for end in (source, sink):
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    client, _ = listener.accept()
    upstream = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    for pair in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=pair, daemon=True).start()
"""


@contextlib.contextmanager
def tcp_proxy(url: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A process forwarding a loopback port to ``url``'s: its URL and process. Killing it is, for a client, the
    server going away (connections reset, then refused), without stopping the server other tests share."""
    parts = urlsplit(url)
    process = subprocess.Popen([sys.executable, "-c", _PROXY, str(parts.port)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())  # type: ignore[union-attr]
        yield f"{parts.scheme}://127.0.0.1:{port}", process
    finally:
        process.kill()
        process.wait(30)
