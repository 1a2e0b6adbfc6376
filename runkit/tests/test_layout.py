"""runkit reads as a library: it imports only what it declares, no import runs in a circle, no file outgrows one
idea. A reader follows any import down without coming back where it started.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from support import ROOT

SOURCE = ROOT / "src" / "runkit"
KIT = SOURCE
MOST_LINES = 300  # per file
MOST_CLI_LINES = 150  # the CLI class


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of the modules a file of ``package`` imports (relative imports resolved; ``from . import x``
    names the module ``package.x`` when that is one)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of this package it imports (anywhere in the file, functions included)."""
    files = {module_name(path): path for path in SOURCE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = imported_modules(path.read_text(), package)
        graph[name] = {module for module in imported if module in files and module != name}
    return graph


def declared() -> set[str]:
    """The import names of what ``pyproject.toml`` declares, extras included (pytest: ``runkit.testing`` only)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    names = {
        requirement.split(">")[0].split("=")[0].split("[")[0].split("<")[0].strip() for requirement in requirements
    }
    imported_as = {"pyyaml": "yaml", "psycopg": "psycopg", "mlflow-skinny": "mlflow", "jsonargparse": "jsonargparse"}
    # What those bring and the kit imports by name: numpy (torch), sqlalchemy (optuna), google.protobuf (tensorboard).
    return {imported_as.get(name, name).replace("-", "_") for name in names} | {"numpy", "sqlalchemy", "google"}


def test_runkit_imports_only_itself_the_standard_library_and_what_it_declares() -> None:
    allowed = declared() | set(sys.stdlib_module_names) | {"runkit"}
    found = {}
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(SOURCE)))
    assert len(found) > 10
    assert {top: where for top, where in found.items() if top not in allowed} == {}


def test_no_import_runs_in_a_circle() -> None:
    graph = import_graph()
    # A package's __init__ re-exporting its own modules is not a circle: only edges into other modules count.
    edges = {name: {m for m in ms if not name.startswith(f"{m}.")} for name, ms in graph.items()}
    seen, circles = set(), []

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            circles.append(" -> ".join([*path[path.index(node) :], node]))
            return
        if node in seen:
            return
        for successor in sorted(edges[node]):
            visit(successor, [*path, node])
        seen.add(node)

    for node in sorted(edges):
        visit(node, [])
    assert circles == []


BELOW = {  # a package, and the kit's packages it must never import: each reads without the ones above it
    "runkit.safety": ("runkit.run", "runkit.trackers", "runkit.command", "runkit.search"),
    "runkit.run": ("runkit.trackers", "runkit.command", "runkit.search"),
    "runkit.trackers": ("runkit.command", "runkit.search"),
}


def test_the_run_and_the_trackers_never_import_the_command_line() -> None:
    graph = import_graph()
    assert {"runkit.run.session", "runkit.trackers.placement", "runkit.command.cli"} <= set(graph)
    upward = {
        f"{name} -> {module}"
        for name, modules in graph.items()
        for package, above in BELOW.items()
        if name.startswith(f"{package}.")
        for module in modules
        if module.startswith(above)
    }
    assert upward == set()


def test_no_file_outgrows_one_idea() -> None:
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in SOURCE.rglob("*.py")}
    assert {path: n for path, n in lengths.items() if n > MOST_LINES} == {}


def test_the_cli_class_is_short() -> None:
    tree = ast.parse((KIT / "command" / "cli.py").read_text())
    (cli,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ProjectCLI"]
    assert cli.end_lineno - cli.lineno + 1 < MOST_CLI_LINES  # type: ignore[operator]


def test_the_checks_see_relative_imports_and_circles() -> None:
    assert "runkit.safety" in imported_modules("from ..safety import checkpoints", "runkit.command")
    assert "runkit.safety.checkpoints" in imported_modules("from ..safety import checkpoints", "runkit.command")
    assert "runkit.safety.signals" in imported_modules("from ...safety.signals import X", "runkit.search.a")
