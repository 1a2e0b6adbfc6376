"""Baking: the files, the answers they carry, no leftover Jinja, and lint-clean output."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TEMPLATE

EXPECTED_FILES = {
    ".github/workflows/ci.yml",
    ".gitignore",
    ".pre-commit-config.yaml",
    "LICENSE",
    "Makefile",
    "README.md",
    "bench/common.py",
    "bench/compiled.py",
    "bench/data_pipeline.py",
    "bench/ddp.py",
    "bench/gpu.py",
    "bench/overhead.py",
    "bench/precision.py",
    "bench/run.py",
    "bench/safeguards.py",
    "bench/startup.py",
    "configs/accumulate.yaml",
    "configs/activation_checkpointing.yaml",
    "configs/checkpoint_steps.yaml",
    "configs/clip_norm.yaml",
    "configs/clip_value.yaml",
    "configs/compile.yaml",
    "configs/ddp.yaml",
    "configs/debug.yaml",
    "configs/default.yaml",
    "configs/detect_anomaly.yaml",
    "configs/deterministic.yaml",
    "configs/fast_dev_run.yaml",
    "configs/fsdp.yaml",
    "configs/groupnorm.yaml",
    "configs/limit_batches.yaml",
    "configs/overfit.yaml",
    "configs/precision_16.yaml",
    "configs/precision_bf16.yaml",
    "configs/predict.yaml",
    "configs/profile.yaml",
    "configs/transformer.yaml",
    "configs/warmup_restarts.yaml",
    "pyproject.toml",
    "scripts/slurm.sbatch",
    "scripts/torchrun.sh",
    "src/{pkg}/__init__.py",
    "src/{pkg}/__main__.py",
    "src/{pkg}/boundaries.py",
    "src/{pkg}/checkpoint_io.py",
    "src/{pkg}/checkpoints.py",
    "src/{pkg}/cli.py",
    "src/{pkg}/data.py",
    "src/{pkg}/data_checks.py",
    "src/{pkg}/export.py",
    "src/{pkg}/memory.py",
    "src/{pkg}/module.py",
    "src/{pkg}/monitoring.py",
    "src/{pkg}/networks.py",
    "src/{pkg}/nonfinite.py",
    "src/{pkg}/prediction.py",
    "src/{pkg}/preemption.py",
    "src/{pkg}/profiling.py",
    "src/{pkg}/resume.py",
    "src/{pkg}/sampling.py",
    "src/{pkg}/schedule_preview.py",
    "src/{pkg}/schedules.py",
    "src/{pkg}/synthetic.py",
    "src/{pkg}/trainer.py",
    "tests/conftest.py",
    "tests/faults.py",
    "tests/probes.py",
    "tests/test_accumulation.py",
    "tests/test_bench.py",
    "tests/test_checkpoints.py",
    "tests/test_cli.py",
    "tests/test_clipping.py",
    "tests/test_compile.py",
    "tests/test_composition.py",
    "tests/test_configs.py",
    "tests/test_conventions.py",
    "tests/test_data.py",
    "tests/test_ddp.py",
    "tests/test_debug_presets.py",
    "tests/test_determinism.py",
    "tests/test_export.py",
    "tests/test_failfast.py",
    "tests/test_fsdp.py",
    "tests/test_multinode.py",
    "tests/test_networks.py",
    "tests/test_observability.py",
    "tests/test_precision.py",
    "tests/test_prediction.py",
    "tests/test_readme.py",
    "tests/test_resume.py",
    "tests/test_schedule_logged.py",
    "tests/test_schedules.py",
    "tests/test_slurm.py",
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
    return {str(path.relative_to(project)) for path in project.rglob("*") if path.is_file()}


def ruff(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=project, capture_output=True, text=True)


def test_default_bake_has_the_expected_files(baked: Callable[..., Path]) -> None:
    project = baked()
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
def test_no_jinja_left_and_ruff_clean(baked: Callable[..., Path], answers: dict[str, str]) -> None:
    project = baked(**answers)
    for name in files_of(project):
        text = (project / name).read_text(encoding="utf-8")
        assert not LEFTOVER_JINJA.search(text), f"unrendered Jinja in {name}"
    for args in (["check", "."], ["format", "--check", "."]):
        result = ruff(project, *args)
        assert result.returncode == 0, result.stdout + result.stderr


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
    assert f"class_path: {package}.networks.ConvNet" in (project / "configs/default.yaml").read_text()
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
