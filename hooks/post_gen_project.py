"""Makes the project a git repository with a first commit, where git is installed; tells the user what to run next.

A run records the commit of the code that ran (``provenance.yaml``): a project that is no repository records
``git: null`` until someone makes it one. Nothing here stops the generation: where git fails, one line says so.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

ANSWERS: dict[str, str] = json.loads(r"""{{ cookiecutter | jsonify }}""")


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs git in ``cwd`` with no terminal to prompt on; its output as text."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


def first_commit(project: Path, answers: dict[str, str]) -> str | None:
    """Makes ``project`` a git repository holding every generated file in one commit; a line saying why not, if not.

    Not under cruft (``_commit`` in the answers): ``cruft create`` writes ``.cruft.json`` after this hook, and
    ``cruft update`` generates the template twice in scratch folders and diffs them whole, a ``.git`` included.
    Not inside another repository's work tree: the project is part of that one.
    """
    if "_commit" in answers:
        return None
    if shutil.which("git") is None:
        return "git is not installed: the project is no git repository (`git init` makes it one)"
    try:
        inside = git(project.parent, "rev-parse", "--is-inside-work-tree")
        if inside.returncode == 0 and inside.stdout.strip() == "true":
            return None  # the output folder's repository holds the project
        branch = git(project, "config", "--get", "init.defaultBranch").stdout.strip() or "main"
        steps = (
            ("init", lambda: ["-c", f"init.defaultBranch={branch}", "init", "--quiet"]),
            ("add", lambda: ["add", "--all"]),
            ("commit", lambda: commit_args(project, answers)),
        )
        for name, args in steps:
            result = git(project, *args())
            if result.returncode != 0:
                reason = (result.stderr.strip() or f"exit status {result.returncode}").splitlines()[-1]
                raise OSError(f"git {name}: {reason}")
    except (OSError, subprocess.SubprocessError) as error:
        shutil.rmtree(project / ".git", ignore_errors=True)
        return f"{error}: the project is no git repository (`git init` makes it one)"
    return None


def commit_args(project: Path, answers: dict[str, str]) -> list[str]:
    """``git commit``'s arguments: the git user's identity, or the answers' ``author_name`` and ``email`` where git
    has none configured."""
    identity = []
    for key, value in (("user.name", answers["author_name"]), ("user.email", answers["email"])):
        if not git(project, "config", "--get", key).stdout.strip():
            identity += ["-c", f"{key}={value}"]
    return [*identity, "commit", "--quiet", "--no-verify", "--message", f"Generate {answers['project_name']}"]


def local_runkit(project: Path) -> str | None:
    """The line that says the project installs runkit from a folder of this machine, and what to change before
    sharing it; ``None`` where its requirement is a URL others can reach (or a package index)."""
    found = re.search(r'"(runkit @ (?:git\+)?file:[^"]*)"', (project / "pyproject.toml").read_text(encoding="utf-8"))
    if found is None:
        return None
    return (
        f"note: pyproject.toml installs runkit from this machine ({found[1]}): a colleague's install of the project"
        " fails there. Before sharing it, name the template's git URL at a commit or tag in that line"
        " (runkit @ git+https://<host>/<org>/<template>@<commit>#subdirectory=runkit), or the team's package index"
        " (runkit_requirement=index): generate again with runkit_requirement=<that>, or push the template's commit to a"
        " remote of its clone and generate again"
    )


if __name__ == "__main__":
    package = ANSWERS["package_name"]
    problem = first_commit(Path.cwd(), ANSWERS)
    if problem is not None:
        print(f"warning: {problem}")
    print(
        f"\nGenerated {ANSWERS['project_slug']}/. Next:\n"
        f"  cd {ANSWERS['project_slug']} && pip install -e '.[dev]'    # or: make install\n"
        f"  {package} fit                         # the default run: configs/default.yaml\n"
        f"  {package} validate --ckpt_path best\n"
        "  make test\n"
    )
    if (note := local_runkit(Path.cwd())) is not None:
        print(note)
