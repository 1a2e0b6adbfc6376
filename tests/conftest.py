"""Baking helpers shared by the template's tests."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter
from runkit.testing.fixtures import as_from_a_terminal

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
# cruft works on a git repository of the template: these are all the template's files.
TEMPLATE_FILES = (
    "cookiecutter.json",
    "fresh_extensions.py",
    "local_extensions.py",
    "hooks",
    "{{cookiecutter.project_slug}}",
    "runkit",
)
GIT_ENVIRONMENT = {
    "GIT_AUTHOR_NAME": "Template Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Template Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    # git's defaults, whatever the machine's configuration says (conflict markers, rename detection).
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def pytest_configure(config: pytest.Config) -> None:
    as_from_a_terminal()  # a `make test &` ignores SIGINT: the suites it runs would inherit that


DURATIONS = json.loads((ROOT / "tests" / "durations.json").read_text(encoding="utf-8"))
"""Seconds the longest tests here and each of runkit's test files took: the order of the work and runkit's parts."""


def expected_seconds(item: pytest.Item) -> float:
    """What ``item`` should take: measured (durations.json; a part of runkit's suite: its files' sum), else 1 s."""
    name = getattr(item, "originalname", item.name)
    if (seconds := getattr(item.module, "expected_seconds", None)) is not None:  # type: ignore[attr-defined]
        return float(seconds(item))
    return float(DURATIONS["tests"].get(f"{item.path.name}::{name}", 1.0))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first, dealt to the workers in turn (1 2 2 1 1 2 ...): ``--dist worksteal`` gives each worker a
    contiguous half of the list and an idle one takes the end of the other's, so each starts with its share of the
    long tests (runkit's parts, the generated suite, the upgrade) and both end on short ones, together."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    ranked = sorted(items, key=expected_seconds, reverse=True)
    rounds = [ranked[start : start + workers] for start in range(0, len(ranked), workers)]
    dealt = [round_ if number % 2 == 0 else round_[::-1] for number, round_ in enumerate(rounds)]
    items[:] = [
        item for worker in range(workers) for round_ in dealt if worker < len(round_) for item in [round_[worker]]
    ]


def bake(output_dir: Path, **answers: str) -> Path:
    """Generates a project with the default answers overridden by ``answers``; returns its directory."""
    return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(output_dir), extra_context=answers))


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--quiet", *args], check=True)


def run(cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """Runs ``command`` in ``cwd`` with a git identity and git's default configuration; its output as text."""
    env = {**os.environ, **GIT_ENVIRONMENT}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def git(cwd: Path, *args: str) -> str:
    """Runs git in ``cwd``; fails the test if git fails; its standard output."""
    result = run(cwd, "git", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def cruft(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(cwd, sys.executable, "-m", "cruft", *args)


def cruft_create(template: Path, output_dir: Path, answers: dict[str, str]) -> None:
    """Bakes ``template`` into ``output_dir`` with ``cruft create`` and ``answers``; fails the test if cruft fails."""
    output_dir.mkdir(parents=True, exist_ok=True)
    created = cruft(output_dir, "create", str(template), "--no-input", "--output-dir", str(output_dir),
                    "--extra-context", json.dumps(answers))  # fmt: skip
    assert created.returncode == 0, created.stderr


def edit(path: Path, old: str, new: str) -> None:
    """Replaces ``old``, which ``path`` holds exactly once, with ``new``."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not in {path} exactly once"
    path.write_text(text.replace(old, new), encoding="utf-8")


def copy_template(repo: Path) -> None:
    """Puts this working tree's template files into ``repo`` in place of those there (uncommitted work included)."""
    for name in TEMPLATE_FILES:
        source, target = ROOT / name, repo / name
        if target.is_dir():
            shutil.rmtree(target)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*_cache"))
        else:
            shutil.copy2(source, target)


def committed_template(repo: Path, message: str = "template") -> Path:
    """A new git repository ``repo`` (branch ``main``) holding this working tree's template files, committed."""
    repo.mkdir()
    copy_template(repo)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", f"--message={message}")
    return repo


@pytest.fixture
def baked(tmp_path: Path) -> Callable[..., Path]:
    return lambda **answers: bake(tmp_path, **answers)


@pytest.fixture(scope="session")
def default_bake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default answers' project, baked once per test process, for the tests that only read it (a test that writes
    into a project, a cache or a run included, bakes its own with ``baked``)."""
    return bake(tmp_path_factory.mktemp("default-bake"))


def editable_source(distribution: str) -> str | None:
    """The source folder of an editable install of ``distribution`` in this environment, if there is one."""
    importlib.invalidate_caches()
    try:
        direct_url = importlib.metadata.distribution(distribution).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    url = json.loads(direct_url or "{}").get("url", "")
    return url.removeprefix("file://") or None


@contextlib.contextmanager
def install(project: Path) -> Iterator[Path]:
    """Installs a baked project (editable, ``--no-deps`` against the pinned stack) for the ``with`` block.

    The generated code supports Python >= 3.10 whatever its ``requires-python`` says, so a bake that asks for
    a newer Python than this interpreter is installed too. An install of the same name that was there before
    (``make main``'s) is put back afterwards.
    """
    before = editable_source(project.name)
    pip("install", "--no-deps", "--no-build-isolation", "--ignore-requires-python", "--editable", str(project))
    try:
        yield project
    finally:
        pip("uninstall", "--yes", project.name)
        if before is not None and Path(before).is_dir():
            pip("install", "--no-deps", "--no-build-isolation", "--ignore-requires-python", "--editable", before)


@pytest.fixture
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Path]]:
    """Bakes and installs projects for the test; uninstalls them after."""
    with contextlib.ExitStack() as stack:
        yield lambda **answers: stack.enter_context(install(bake(tmp_path_factory.mktemp("bake"), **answers)))


# A quick slice of a generated suite: the default config builds, and the installed runkit is one the project
# admits. For extra bakes whose whole suite would not fit the CI budget (test_generated.py runs it on the default
# bake, the kit's smoke test of fit, a SIGTERM, the resume and validate through the console script among it;
# test_replace_example.py runs what is left of it on a non-default bake whose example is replaced; the code of every
# bake is the same, only metadata differs).
SMOKE_TESTS = (
    "tests/test_configs.py::test_no_config_builds_the_classes_of_the_starting_configs",
    "tests/test_kit_smoke.py::test_the_installed_runkit_is_one_this_project_admits",
)


def assert_tests_pass(project: Path, *pytest_args: str) -> None:
    """Runs a generated project's own test suite in a fresh interpreter; fails with its output if it fails."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout
