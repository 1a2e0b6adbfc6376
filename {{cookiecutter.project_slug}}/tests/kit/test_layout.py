"""The kit stands on its own: no module of ``kit/`` imports the task, so a team can replace ``task/`` freely."""

from __future__ import annotations

import ast

from support import PACKAGE, ROOT

KIT = ROOT / "src" / PACKAGE / "kit"


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of the modules a file of ``package`` imports (relative imports resolved)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            names.add(".".join([*base, node.module] if node.module else base))
    return names


def test_the_kit_never_imports_the_task() -> None:
    files = sorted(KIT.rglob("*.py"))
    assert len(files) > 20
    offenders = []
    for path in files:
        package = ".".join([PACKAGE, *path.relative_to(ROOT / "src" / PACKAGE).parent.parts])
        task = [name for name in imported_modules(path.read_text(), package) if name.startswith(f"{PACKAGE}.task")]
        offenders += [f"{path.relative_to(ROOT)}: {name}" for name in task]
    assert offenders == []


def test_the_check_sees_a_relative_import_of_the_task() -> None:
    assert f"{PACKAGE}.task" in imported_modules("from ..task import gratings", f"{PACKAGE}.kit")
    assert f"{PACKAGE}.task.networks" in imported_modules("from ...task.networks import X", f"{PACKAGE}.kit.search")
