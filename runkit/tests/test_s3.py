"""Runs in S3, on a real S3-protocol server process (moto's, from .venv-moto: servers.s3_server) through s3fs, as a
team's jobs reach their bucket: credentials and endpoint from the environment. The run lives in the bucket whole,
stops on a group SIGTERM, resumes from the bucket bit-exactly, and is listed there; no local folder is named after
the URL, and no file of the run holds the secret key."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml
from servers import S3Server, s3_server, tcp_proxy
from support import PACKAGE

from runkit.run.lock import RunLock, RunLockedError
from runkit.store import StorePath, location
from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, child_path, fit_exit_code, launch, refused

pytest.importorskip("s3fs", reason="runs in S3 need runkit's `s3` extra (s3fs)")
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process reaches the server too (to read what the runs wrote), as the runs do: from the environment."""
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    return s3.env


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float = 300) -> None:
    """Waits until ``text`` is in ``log`` (fails, with the log, if the process ends first or it takes too long)."""
    deadline = time.monotonic() + timeout
    while text not in (log.read_text() if log.exists() else ""):
        if process.poll() is not None or time.monotonic() > deadline:
            why = f"exited {process.returncode}" if process.poll() is not None else f"not within {timeout} s"
            raise AssertionError(f"waited for {text!r} in {log}: {why}\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


@pytest.mark.faults  # ~60-90 s on 2 cores: three processes of the fixture task; test_store.py has its fast twin
def test_a_run_in_s3_stops_on_a_group_sigterm_resumes_from_the_bucket_exactly_and_is_listed(
    cli: ModuleType, in_tmp: Path, s3: S3Server, s3_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    straight = tmp_path_factory.mktemp("straight") / "runs" / "fixture" / "straight"
    root = f"s3://{s3.bucket}/sigterm"
    flags = [f"--trainer.default_root_dir={root}", "--run.name=cut", "--last_checkpoint.every_n_train_steps=1"]
    log = in_tmp / "fit.log"
    env = {**os.environ, "PYTHONPATH": child_path(), "PYTHONWARNINGS": "ignore"}
    with open(log, "w") as out:  # a job of its own, as a scheduler starts one: SIGTERM goes to its whole group
        job = subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "fit", *flags, fault("SleepEachStep", seconds=0.1)],
            cwd=in_tmp,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        # The straight run trains meanwhile; then the job is stopped in its second epoch, a checkpoint per step.
        assert fit_exit_code(cli, straight) == 0
        wait_for_line(log, "epoch 1/2", job)
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(300) == 143, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(60)
    run = location(root) / "fixture" / "cut"
    assert isinstance(run, StorePath)
    stopped = _load(run / "checkpoints" / "last.ckpt")
    assert 16 < stopped["global_step"] < 32, "stopped in the second epoch"
    listed = launch(PACKAGE, "runs", "--root", root, cwd=in_tmp).stdout
    assert "preempted" in listed, listed
    assert f"fit -c {root}/fixture/cut/config.yaml --ckpt_path last" in listed, listed
    resumed = launch(PACKAGE, "fit", *flags, "--ckpt_path=last", "--seed_everything=7", cwd=in_tmp)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert f"resumed from {root}/fixture/cut/checkpoints/last.ckpt" in resumed.stdout
    last, expected = _load(run / "checkpoints" / "last.ckpt"), _load(straight / "checkpoints" / "last.ckpt")
    for key in EXACT:
        assert_identical(last[key], expected[key], key)
    record = yaml.safe_load((run / "provenance.yaml").read_text())
    assert [session["status"] for session in record["sessions"]] == ["preempted", "finished"]
    assert "finished" in launch(PACKAGE, "runs", "--root", root, cwd=in_tmp).stdout
    files = [path for path in run.fs.find(run.path)]
    assert {Path(path).name for path in files} >= {"config.yaml", "provenance.yaml", "last.ckpt", "best.ckpt"}
    assert not any(s3.secret.encode() in run.fs.cat_file(path) for path in files), "a file of the run holds the key"
    assert sorted(in_tmp.rglob("s3:*")) == [], "a local folder named after the URL"


def _load(path: StorePath | Path) -> dict:
    if isinstance(path, StorePath):
        with path.open("rb") as file:
            return torch.load(file, weights_only=True)
    return torch.load(path, weights_only=True)


def test_the_lock_of_a_run_in_s3_is_a_conditional_write_on_the_server(s3: S3Server, s3_env: dict[str, str]) -> None:
    run = location(f"s3://{s3.bucket}/locks/fixture/r")
    assert isinstance(run, StorePath)
    first = RunLock(run)
    first.acquire()
    try:
        with pytest.raises(FileExistsError):  # the server refused it (If-None-Match: *), not a check made here
            (run / ".lock").create_new(b"another writer")
        with pytest.raises(RunLockedError, match=f"process {os.getpid()} on"):
            RunLock(run).acquire()
    finally:
        first.release()
    assert not (run / ".lock").exists()


_UPLOAD = """
import os, sys
from runkit.store import location
location(sys.argv[1]).write_bytes(os.urandom(int(sys.argv[2])))  # large enough for a multipart upload
"""


def test_a_process_killed_mid_upload_leaves_the_object_it_replaces(s3: S3Server, s3_env: dict[str, str]) -> None:
    target = location(f"s3://{s3.bucket}/killed/run/checkpoints/last.ckpt")
    assert isinstance(target, StorePath)
    before = os.urandom(1 << 20)
    target.write_bytes(before)
    uploads = s3.log.read_text().count("?uploads")
    size = 160 << 20  # s3fs uploads in parts above 100 MiB: the object is made whole only by the last request
    job = subprocess.Popen([sys.executable, "-c", _UPLOAD, str(target), str(size)], env={**os.environ})
    try:
        deadline = time.monotonic() + 300
        while s3.log.read_text().count("?uploads") == uploads:  # the multipart upload has begun on the server
            assert job.poll() is None, f"the upload ended (exit {job.returncode}) before it was seen starting"
            assert time.monotonic() < deadline, f"no multipart upload started in {s3.log} within 300 s"
            time.sleep(0.01)
        job.kill()
    finally:
        job.kill()
        job.wait(60)
    assert job.returncode == -signal.SIGKILL  # killed, not finished
    assert target.read_bytes() == before  # whole, and still the one it was


def _buckets(s3: S3Server) -> list[str]:
    fs = location(f"s3://{s3.bucket}").fs  # type: ignore[union-attr]
    fs.invalidate_cache()
    return sorted(fs.ls(""))


@pytest.mark.parametrize(
    ("root", "message"),
    [
        ("s3://kit-runz/runs", "s3://kit-runz/runs: no bucket 'kit-runz' at http://127.0.0.1:"),
        ("s3://", "s3:// names no bucket: s3://<bucket>/<folder>"),
        ("s3:///runs", "s3:///runs names no bucket: s3://<bucket>/<folder>"),
        ("s3://kit runs/x", "s3://kit runs/x: 'kit runs' is not a bucket name (letters, digits, '.', '-', '_';"),
    ],
)
def test_a_run_root_whose_bucket_does_not_exist_is_refused_and_no_bucket_is_made(
    cli: ModuleType, in_tmp: Path, s3: S3Server, s3_env: dict[str, str], root: str, message: str
) -> None:
    # s3fs's makedirs created a misspelled bucket (and `s3://` made the experiment name one): the run went there.
    with pytest.raises(SystemExit) as exit_info:
        cli.build_cli(["fit", f"--trainer.default_root_dir={root}", "--trainer.max_epochs=1"])
    assert exit_info.value.code == 2
    assert _buckets(s3) == [s3.bucket]
    listed = launch(PACKAGE, "runs", "--root", root, cwd=in_tmp)
    assert listed.returncode == 2, listed.stdout
    assert listed.stdout.strip().startswith(f"error: {message}"), listed.stdout


def test_a_refused_root_names_the_bucket_in_one_line(
    cli: ModuleType, in_tmp: Path, s3: S3Server, s3_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fit = ["fit", "--trainer.default_root_dir=s3://kit-runz/runs", "--trainer.max_epochs=1"]
    error = refused(capsys, lambda: cli.build_cli(fit))  # exit 2, one line, no traceback
    expected = f"no bucket 'kit-runz' at {s3.env['AWS_ENDPOINT_URL']}; create it (the kit creates none) or fix its name"
    assert error == f"error: trainer.default_root_dir: s3://kit-runz/runs: {expected}"
    assert _buckets(s3) == [s3.bucket]


def test_missing_credentials_name_the_root_and_the_variables(in_tmp: Path, s3: S3Server) -> None:
    # botocore's `Unable to locate credentials` alone named neither the run root nor what to set.
    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    env = {key: "" for key in keys if key in os.environ}  # launch passes os.environ on; botocore reads "" as unset
    env.update(AWS_ENDPOINT_URL=s3.env["AWS_ENDPOINT_URL"], AWS_SHARED_CREDENTIALS_FILE="none", AWS_CONFIG_FILE="none")
    env.update(AWS_EC2_METADATA_DISABLED="true")  # no instance metadata service to wait for
    done = launch(PACKAGE, "fit", f"--trainer.default_root_dir=s3://{s3.bucket}/runs", cwd=in_tmp, env=env)
    assert done.returncode == 2, done.stdout
    assert done.stdout.strip().splitlines()[-1] == (
        f"error: trainer.default_root_dir: s3://{s3.bucket}/runs: no credentials for the store at"
        f" {s3.env['AWS_ENDPOINT_URL']}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the"
        " environment (Unable to locate credentials)"
    ), done.stdout


def test_the_store_going_away_mid_run_ends_in_one_error_line(
    in_tmp: Path, s3: S3Server, s3_env: dict[str, str]
) -> None:
    # The store's endpoint is gone after step 2 (the proxy in front of it killed): every writer of the run met it, and
    # the command ended in 274 lines and 4 tracebacks, no `error:` line.
    root = f"s3://{s3.bucket}/gone"
    with tcp_proxy(s3.env["AWS_ENDPOINT_URL"]) as (url, proxy):
        env = {**s3.env, "AWS_ENDPOINT_URL": url, "AWS_MAX_ATTEMPTS": "2"}  # the client's retries: 2, not 5
        done = launch(
            PACKAGE,
            "fit",
            f"--trainer.default_root_dir={root}",
            "--run.name=cut",
            "--last_checkpoint.every_n_train_steps=1",
            "--trainer.max_epochs=1",
            fault("SignalAtStep", step=2, pid=proxy.pid),
            cwd=in_tmp,
            env=env,
        )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "Traceback" not in done.stdout, done.stdout[-3000:]
    assert "Exception in thread" not in done.stdout, done.stdout[-3000:]
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert errors == [done.stdout.strip().splitlines()[-1]], done.stdout[-3000:]
    assert errors[0].startswith(f"error: {root}/fixture/cut: the store at {url} stopped answering while fit ran")
    assert errors[0].endswith("continue with --ckpt_path last once the store answers")
    saved = _load(location(root) / "fixture" / "cut" / "checkpoints" / "last.ckpt")  # through the server itself
    assert saved["global_step"] in (1, 2)  # whole: the last save that reached the store


def test_an_endpoint_that_is_not_s3_is_one_line_and_nothing_is_created(in_tmp: Path) -> None:
    # An HTTP server that is no S3 server answers 404 to everything: botocore's `404 ... CreateBucket` came out raw,
    # from s3fs making the bucket it did not find.
    class NotS3(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_error(404)

        do_GET = do_PUT = do_POST = do_HEAD  # noqa: N815 (http.server's names)

        def log_message(self, *args: object) -> None:
            self.server.requests.append(self.command)  # type: ignore[attr-defined]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotS3)
    server.requests = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_MAX_ATTEMPTS": "1"}
    try:
        done = launch(PACKAGE, "fit", "--trainer.default_root_dir=s3://team/runs", cwd=in_tmp, env=env)
    finally:
        server.shutdown()
    assert done.returncode == 2, done.stdout
    assert done.stdout.strip().splitlines()[-1] == (
        f"error: trainer.default_root_dir: s3://team/runs: no bucket 'team' at {url}; create it (the kit creates none)"
        " or fix its name"
    ), done.stdout
    requests = server.requests  # type: ignore[attr-defined]
    assert requests, "the endpoint was never asked"
    assert set(requests) <= {"HEAD", "GET"}, requests  # no PUT: no bucket made
