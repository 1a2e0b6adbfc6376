"""Baking: the files, the answers they carry, no leftover Jinja, and lint-clean output."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TEMPLATE, bake

EXPECTED_FILES = {
    ".github/workflows/ci.yml",
    ".gitignore",
    ".pre-commit-config.yaml",
    "LICENSE",
    "Makefile",
    "README.md",
    "configs/debug/detect_anomaly.yaml",
    "configs/debug/fast_dev_run.yaml",
    "configs/debug/limit_batches.yaml",
    "configs/debug/profile.yaml",
    "configs/debug/tiny.yaml",
    "configs/default.yaml",
    "configs/distributed/ddp.yaml",
    "configs/distributed/fsdp.yaml",
    "configs/example/activation_checkpointing.yaml",
    "configs/example/compile.yaml",
    "configs/example/data.yaml",
    "configs/example/fsdp.yaml",
    "configs/example/groupnorm.yaml",
    "configs/example/image_folder.yaml",
    "configs/example/model.yaml",
    "configs/example/overfit.yaml",
    "configs/example/search.yaml",
    "configs/example/small_data.yaml",
    "configs/example/sweep.yaml",
    "configs/example/transformer.yaml",
    "configs/example/warmup_restarts.yaml",
    "configs/logger/csv.yaml",
    "configs/logger/mlflow.yaml",
    "configs/logger/tensorboard.yaml",
    "configs/logger/wandb.yaml",
    "configs/precision/bf16.yaml",
    "configs/precision/fp16.yaml",
    "configs/predict/writer.yaml",
    "configs/training/accumulate.yaml",
    "configs/training/benchmark.yaml",
    "configs/training/checkpoint_steps.yaml",
    "configs/training/clip_norm.yaml",
    "configs/training/clip_value.yaml",
    "configs/training/deterministic.yaml",
    "configs/training/early_stopping.yaml",
    "configs/training/ema.yaml",
    "pyproject.toml",
    "scripts/slurm.sbatch",
    "scripts/sweep.sbatch",
    "scripts/test_gpu.py",
    "scripts/torchrun.sh",
    "src/{pkg}/__init__.py",
    "src/{pkg}/__main__.py",
    "src/{pkg}/cli.py",
    "src/{pkg}/task/__init__.py",
    "src/{pkg}/task/classifier.py",
    "src/{pkg}/task/gratings.py",
    "src/{pkg}/task/image_folder.py",
    "src/{pkg}/task/make_image_folder.py",
    "src/{pkg}/task/networks.py",
    "tests/conftest.py",
    "tests/support.py",
    "tests/test_configs.py",
    "tests/task/conftest.py",
    "tests/task/example.py",
    "tests/task/test_conventions.py",
    "tests/task/test_example_bad_input.py",
    "tests/task/test_example_presets.py",
    "tests/task/test_fsdp.py",
    "tests/task/test_gpu.py",
    "tests/task/test_gratings.py",
    "tests/task/test_image_folder.py",
    "tests/task/test_input_checks.py",
    "tests/task/test_networks.py",
    "tests/task/test_predict_files.py",
    "tests/task/test_readme.py",
    "tests/test_kit_smoke.py",
}
# GitHub Actions expressions `${{ ... }}` are meant to survive; any other Jinja left over is a bug.
LEFTOVER_JINJA = re.compile(r"(?<!\$)\{\{|\{%|\{#")
NON_DEFAULT = {
    "project_name": "Détection d'Objets 数据 v2",
    "author_name": 'Zoë "Z" Ångström',
    "email": "zoe@example.org",
    "description": 'Finds "things"\\ in pictures',
    "license": "Apache-2.0",
    "python_version": "3.12",
}


def files_of(project: Path) -> set[str]:
    """The project's files, relative; not those of its git repository (``.git/``, made by the post-generation hook)."""
    names = (path.relative_to(project) for path in project.rglob("*") if path.is_file())
    return {str(name) for name in names if name.parts[0] != ".git"}


def ruff(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """ruff on ``project``, leaving no cache in it (a bake may be shared: ``default_bake``)."""
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache"], cwd=project, capture_output=True, text=True
    )


def test_default_bake_has_the_expected_files(default_bake: Path) -> None:
    project = default_bake
    assert project.name == "image-classifier"
    assert files_of(project) == {name.format(pkg="image_classifier") for name in EXPECTED_FILES}


def test_every_template_file_is_expected() -> None:
    in_template = {
        name.replace("{{cookiecutter.package_name}}", "{pkg}")
        for name in files_of(TEMPLATE)
        if "__pycache__" not in name and not name.endswith(".pyc")
    }
    assert in_template == EXPECTED_FILES


@pytest.mark.parametrize("answers", [{}, NON_DEFAULT], ids=["defaults", "non-default"])
def test_no_jinja_left_and_ruff_clean(baked: Callable[..., Path], default_bake: Path, answers: dict[str, str]) -> None:
    project = baked(**answers) if answers else default_bake
    for name in files_of(project):
        text = (project / name).read_text(encoding="utf-8")
        assert not LEFTOVER_JINJA.search(text), f"unrendered Jinja in {name}"
    for args in (["check", "."], ["format", "--check", "."]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr


def class_paths(project: Path) -> dict[str, list[str]]:
    """Every ``class_path`` each config of ``project`` names, by the config's path under ``configs/``."""
    return {
        str(path.relative_to(project / "configs")): re.findall(r"class_path:\s*(\S+)", path.read_text(encoding="utf-8"))
        for path in sorted((project / "configs").rglob("*.yaml"))
    }


def test_two_projects_name_runkits_classes_alike(default_bake: Path, tmp_path: Path) -> None:
    # Configs, search results and checkpoints' hyperparameters travel between projects: runkit's classes are
    # runkit.X in every one; only the example's own classes carry the package's name.
    first, second = default_bake, bake(tmp_path / "other", project_name="Other Thing")
    paths = {
        package: class_paths(project) for package, project in (("image_classifier", first), ("other_thing", second))
    }
    assert paths["image_classifier"].keys() == paths["other_thing"].keys()
    for config, named in paths["image_classifier"].items():
        assert [p.replace("image_classifier.", "other_thing.") for p in named] == paths["other_thing"][config], config
    kit = {p for named in paths["other_thing"].values() for p in named if not p.startswith("other_thing.")}
    assert {"runkit.WarmupCosine", "runkit.EarlyStoppingOnBest", "runkit.PredictionWriter"} <= kit
    assert not [p for p in kit if ".kit." in p]


def test_answers_reach_the_project(baked: Callable[..., Path]) -> None:
    project = baked(**NON_DEFAULT)
    assert project.name == "detection-d-objets-shu-ju-v2"
    package = "detection_d_objets_shu_ju_v2"
    assert (project / "src" / package / "cli.py").is_file()
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["name"] == project.name
    assert meta["project"]["description"] == NON_DEFAULT["description"]
    assert meta["project"]["authors"] == [{"name": NON_DEFAULT["author_name"], "email": NON_DEFAULT["email"]}]
    assert meta["project"]["requires-python"] == ">=3.12"
    assert meta["project"]["license"] == "Apache-2.0"
    assert meta["project"]["scripts"] == {package: f"{package}.cli:main"}
    assert meta["tool"]["ruff"]["target-version"] == "py312"
    assert f"class_path: {package}.task.networks.ConvNet" in (project / "configs/example/model.yaml").read_text()
    assert "# Détection d'Objets 数据 v2" in (project / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("key", "answer"),
    [
        ("description", "Finds cats 😺 and 数据 in pictures 🐈‍⬛"),  # outside the Basic Multilingual Plane, and a ZWJ
        ("author_name", "Zoë 🦀 Ångström"),
        ("description", 'tab\there, "quotes", back\\slash, bell \x07'),  # escapes and a control character
    ],
)
def test_any_unicode_answer_gives_valid_toml(baked: Callable[..., Path], key: str, answer: str) -> None:
    meta = tomllib.loads((baked(**{key: answer}) / "pyproject.toml").read_text(encoding="utf-8"))
    project = meta["project"]
    assert (project["description"] if key == "description" else project["authors"][0]["name"]) == answer


@pytest.mark.parametrize(
    ("license_name", "marker"),
    [
        ("MIT", "Permission is hereby granted, free of charge"),
        ("Apache-2.0", "Apache License\n                           Version 2.0"),
        ("BSD-3-Clause", "Redistribution and use in source and binary forms"),
        ("Proprietary", "All rights reserved."),
    ],
)
def test_each_license(baked: Callable[..., Path], license_name: str, marker: str) -> None:
    project = baked(license=license_name, author_name="Ada Lovelace")
    text = (project / "LICENSE").read_text()
    assert marker in text
    assert "Ada Lovelace" in text
    spdx = "LicenseRef-Proprietary" if license_name == "Proprietary" else license_name
    assert tomllib.loads((project / "pyproject.toml").read_text())["project"]["license"] == spdx


@pytest.mark.parametrize("python_version", ["3.10", "3.11", "3.12", "3.13"])
def test_each_python_version(baked: Callable[..., Path], python_version: str) -> None:
    meta = tomllib.loads((baked(python_version=python_version) / "pyproject.toml").read_text())
    assert meta["project"]["requires-python"] == f">={python_version}"
    assert meta["tool"]["ruff"]["target-version"] == "py" + python_version.replace(".", "")
