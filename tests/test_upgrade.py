"""A project generated before the kit was regrouped takes the change with `cruft update`, as CHANGELOG.md says.

The project is baked from the template at ``BEFORE`` (the last commit before the move) and edited the ways a team
edits it: a network and a test of its own, a default changed in the LightningModule and one in a kit file that
moves, presets changed and one added, and the default run's epochs, learning rate and batch size changed in
``configs/default.yaml``. It is then updated to this working tree's template.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml
from conftest import (
    ROOT,
    SMOKE_TESTS,
    TEMPLATE_FILES,
    assert_tests_pass,
    copy_template,
    cruft,
    cruft_create,
    edit,
    git,
    install,
    run,
)
from cookiecutter.main import cookiecutter

BEFORE = "02f50aed7af812a199c69bcb0aabf2e5acb6244b"  # the parent of 7212c33, which began the move
ANSWERS = {"project_name": "Upgrade Follower"}
PROJECT, PACKAGE = "upgrade-follower", "upgrade_follower"
KIT, TASK = f"src/{PACKAGE}/kit", f"src/{PACKAGE}/task"

# The team's edits that the update keeps as they are: (file before, file after, text, the team's text).
KEPT = [
    ("configs/default.yaml", "configs/default.yaml", "  max_epochs: 10\n", "  max_epochs: 20\n"),  # a line kept
    (  # next to a line the template changes
        "configs/training/early_stopping.yaml",
        "configs/training/early_stopping.yaml",
        "        patience: 3\n",
        "        patience: 5\n",
    ),
    ("configs/model/transformer.yaml", "configs/example/transformer.yaml", "        depth: 3\n", "        depth: 4\n"),
    (  # a file the template changes elsewhere
        f"{TASK}/classifier.py",
        f"{TASK}/classifier.py",
        "        label_smoothing: float = 0.0,\n",
        "        label_smoothing: float = 0.1,\n",
    ),
    (  # a kit file that moves
        f"{KIT}/schedules.py",
        f"{KIT}/parts/schedules.py",
        "        start_factor: float = 0.01,\n",
        "        start_factor: float = 0.1,\n",
    ),
]
# The team's edits of the example's model and data in configs/default.yaml, which the template moves out of it:
# a conflict. Resolved as CHANGELOG.md says: the template's side in default.yaml, the values in configs/example/.
CONFLICTING = [("        lr: 0.003\n", "        lr: 0.001\n"), ("    batch_size: 128\n", "    batch_size: 64\n")]
RESOLUTION = [
    ("configs/example/model.yaml", "        lr: 0.003\n", "        lr: 0.001\n"),
    (
        "configs/example/data.yaml",
        f"data: {PACKAGE}.task.gratings.GratingsDataModule\n",
        f"data: {{class_path: {PACKAGE}.task.gratings.GratingsDataModule, init_args: {{batch_size: 64}}}}\n",
    ),
]
TINY_MLP = '''

class TinyMLP(nn.Module):
    """The team's baseline: one hidden layer on the flattened image."""

    def __init__(
        self, num_classes: int = 10, input_shape: tuple[int, int, int] = (1, 28, 28), hidden: int = 64
    ) -> None:
        super().__init__()
        channels, height, width = input_shape
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(channels * height * width, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)  # (B, num_classes)
'''
# Files the team adds. Its preset names the schedule by the kit module it used to live in.
ADDED = {
    "configs/team/mlp.yaml": f"""# The team's baseline network, with a longer warmup.
model:
  init_args:
    network:
      class_path: {PACKAGE}.task.networks.TinyMLP
      init_args:
        hidden: 32
    scheduler:
      class_path: {PACKAGE}.kit.schedules.WarmupCosine
      init_args:
        warmup_fraction: 0.2
run:
  experiment: mlp
""",
    "tests/task/test_team.py": f'''"""The team's own test."""

import torch
from {PACKAGE}.task.networks import TinyMLP


def test_tiny_mlp_gives_a_logit_per_class() -> None:
    assert TinyMLP(3, (1, 8, 8), hidden=4)(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
''',
}
# The project's own tests after the update: the smoke slice, the team's test, and the edited presets built alone.
PRESETS = ("default", "example/model", "example/data", "team/mlp", "training/early_stopping", "example/transformer")
PROJECT_TESTS = (
    *SMOKE_TESTS,
    "tests/task/test_team.py",
    *(f"tests/task/test_configs.py::test_preset_alone_instantiates_and_round_trips[{name}]" for name in PRESETS),
)
# What the update moves: files that land, and files and folders that go.
LANDED = (
    f"src/{PACKAGE}/cli.py",
    f"{KIT}/command/cli.py",
    f"{KIT}/entry.py",
    f"{KIT}/parts/schedules.py",
    f"{KIT}/safety/preemption.py",
    "configs/example/model.yaml",
    "configs/example/data.yaml",
)
GONE = ("bench", "docs/benchmarks.md", "tests/task/test_bench.py", f"{KIT}/cli.py", f"{KIT}/schedules.py")
CONFLICT = re.compile(r"^<<<<<<< ours\n(.*?)^=======\n(.*?)^>>>>>>> theirs\n", re.MULTILINE | re.DOTALL)


def template_before(repo: Path) -> None:
    """A git repository of the template as it was at ``BEFORE`` (this repository's history must hold it)."""
    if run(ROOT, "git", "cat-file", "-e", f"{BEFORE}^{{commit}}").returncode != 0:
        pytest.fail(f"the template's commit {BEFORE[:7]} is not in {ROOT}: the upgrade test needs its git history")
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    archive = repo / "before.tar"
    git(ROOT, "archive", f"--output={archive}", BEFORE, *TEMPLATE_FILES)
    assert run(repo, "tar", "-xf", str(archive)).returncode == 0
    archive.unlink()
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", f"--message=template at {BEFORE[:7]}")


def make_team_edits(project: Path) -> None:
    for before, _, old, new in KEPT:
        edit(project / before, old, new)
    for old, new in CONFLICTING:
        edit(project / "configs/default.yaml", old, new)
    networks = project / TASK / "networks.py"
    networks.write_text(networks.read_text(encoding="utf-8") + TINY_MLP, encoding="utf-8")
    for name, text in ADDED.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")


def keep_the_templates_side(path: Path) -> str:
    """Resolves each conflict in ``path`` with the template's side; returns the project's sides, joined."""
    text = path.read_text(encoding="utf-8")
    ours = "".join(match.group(1) for match in CONFLICT.finditer(text))
    path.write_text(CONFLICT.sub(lambda match: match.group(2), text), encoding="utf-8")
    return ours


def changelog_command(name: str) -> str:
    """The shell command of CHANGELOG.md's upgrade note that starts with ``name``."""
    (command,) = re.findall(rf"```bash\n\s*({re.escape(name)}.*?)\n\s*```", (ROOT / "CHANGELOG.md").read_text(), re.S)
    return re.sub(r"^   ", "", command, flags=re.MULTILINE)  # the block is indented in its list item


def expected_files(fresh: Path) -> dict[str, bytes]:
    """The upgraded project's files: a fresh bake of the template with the team's edits, and the team's files."""
    files = {
        str(path.relative_to(fresh)): path.read_bytes()
        for path in fresh.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.relative_to(fresh).parts[0] != ".git"
    }  # the fresh bake's own repository (the post-generation hook's) is not among them

    def edited(name: str, old: str, new: str) -> None:
        text = files[name].decode()
        assert text.count(old) == 1, f"{old!r} is not in the fresh {name} exactly once"
        files[name] = text.replace(old, new).encode()

    for _, after, old, new in KEPT:
        edited(after, old, new)
    for name, old, new in RESOLUTION:
        edited(name, old, new)
    files[f"{TASK}/networks.py"] += TINY_MLP.encode()
    for name, text in ADDED.items():
        files[name] = text.encode()
    return files


@pytest.mark.slow
def test_a_project_from_before_the_regrouping_takes_it_with_cruft_update(tmp_path: Path) -> None:
    template = tmp_path / "template"
    template_before(template)
    cruft_create(template, tmp_path, ANSWERS)
    project = tmp_path / PROJECT
    assert {name for name in GONE if (project / name).exists()} == set(GONE)  # the layout before
    git(project, "init", "--quiet", "--initial-branch=main")
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message=baked")
    make_team_edits(project)
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message=the team's edits")

    copy_template(template)  # the template moves on to this working tree
    git(template, "add", "--all")
    git(template, "commit", "--quiet", "--message=the kit regrouped")
    assert cruft(project, "check").returncode == 1

    updated = cruft(project, "update", "--skip-apply-ask")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    # The moved files land and the old ones go.
    assert [name for name in LANDED if not (project / name).is_file()] == []
    assert [name for name in GONE if (project / name).exists()] == []
    # One conflict, as git's own: the team changed the model and data lines that the template moved out.
    assert "Applied patch to 'configs/default.yaml' with conflicts." in updated.stderr
    assert git(project, "diff", "--name-only", "--diff-filter=U").split() == ["configs/default.yaml"]
    assert not list(project.rglob("*.rej"))
    ours = keep_the_templates_side(project / "configs/default.yaml")
    assert all(new in ours for _, new in CONFLICTING)
    for name, old, new in RESOLUTION:
        edit(project / name, old, new)
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "--message=the template's update, the default run's values in configs/example")

    # Every file is the new template's with the team's edits, and nothing else is left.
    fresh = Path(cookiecutter(str(template), no_input=True, output_dir=str(tmp_path / "fresh"), extra_context=ANSWERS))
    expected = expected_files(fresh)
    tracked = set(git(project, "ls-files").splitlines()) - {".cruft.json"}
    assert tracked == set(expected)
    assert [name for name in sorted(expected) if (project / name).read_bytes() != expected[name]] == []
    assert cruft(project, "check").returncode == 0

    with install(project):
        print_config = (sys.executable, "-m", PACKAGE, "fit", "--print_config", "-c", "configs/team/mlp.yaml")
        stale = run(project, *print_config)
        assert stale.returncode == 2
        assert f"module '{PACKAGE}.kit' has no attribute 'schedules'" in stale.stderr
        python_first = f"PATH={shlex.quote(str(Path(sys.executable).parent))}:$PATH\n"  # `python` is this one
        fixed = run(project, "bash", "-c", python_first + changelog_command("python - <<'EOF'"))
        assert fixed.returncode == 0, fixed.stderr
        assert fixed.stdout == "updated configs/team/mlp.yaml\n"
        printed = run(project, *print_config)
        assert printed.returncode == 0, printed.stderr
        config = yaml.safe_load(printed.stdout)
        model = config["model"]["init_args"]
        assert config["trainer"]["max_epochs"] == 20
        assert model["optimizer"]["init_args"]["lr"] == 0.001
        assert config["data"]["init_args"]["batch_size"] == 64
        assert model["label_smoothing"] == 0.1
        assert model["network"]["class_path"] == f"{PACKAGE}.task.networks.TinyMLP"
        assert model["network"]["init_args"]["hidden"] == 32
        assert model["scheduler"]["class_path"] == f"{PACKAGE}.kit.WarmupCosine"
        assert model["scheduler"]["init_args"]["warmup_fraction"] == 0.2
        assert model["scheduler"]["init_args"]["start_factor"] == 0.1
        assert_tests_pass(project, *PROJECT_TESTS)
