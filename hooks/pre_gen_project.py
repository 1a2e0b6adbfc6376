"""Rejects bad answers before anything is generated, naming each problem."""

from __future__ import annotations

import json
import keyword
import re
import sys

from slugify import slugify  # python-slugify: cookiecutter's own dependency and slug filter

# The answers, as JSON inside a raw string: this file stays valid Python before cookiecutter renders it.
ANSWERS: dict[str, str] = json.loads(r"""{{ cookiecutter | jsonify }}""")

LICENSES = ("MIT", "Apache-2.0", "BSD-3-Clause", "Proprietary")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# Top-level modules the generated project imports or installs: a package with one of these names
# would shadow it (`import torch` would find the project instead).
DEPENDENCIES = {
    "torch", "torchvision", "torchaudio", "lightning", "pytorch_lightning", "lightning_fabric",
    "lightning_utilities", "torchmetrics", "tensorboard", "jsonargparse", "numpy", "yaml", "rich",
    "pytest", "ruff", "setuptools", "pip", "hatchling", "typing_extensions", "docstring_parser",
    "onnx", "onnxruntime", "onnxscript", "cookiecutter", "cruft", "tests", "src", "configs", "scripts",
}  # fmt: skip
STDLIB = set(sys.stdlib_module_names) | {"test"}  # CPython's own test package is not in the list
SLUG = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def problems(answers: dict[str, str]) -> list[str]:
    """Every problem with the answers, as a message naming the prompt."""
    found = []
    for key in ("project_name", "author_name"):
        if not answers[key].strip():
            found.append(f"{key} is empty")
    if answers["project_name"].strip() and not slugify(answers["project_name"]):
        found.append(f"project_name {answers['project_name']!r} has no letters or digits to make a slug from")
    slug = answers["project_slug"]
    if not SLUG.match(slug):
        found.append(
            f"project_slug {slug!r} is not a valid distribution name: use lowercase letters, digits and"
            " single '-', '_' or '.' between them (it is derived from project_name; set it explicitly)"
        )
    package = answers["package_name"]
    if not package.isidentifier() or not package.isascii():
        found.append(
            f"package_name {package!r} is not an ASCII Python identifier (letters, digits, '_'; no leading digit)"
        )
    elif keyword.iskeyword(package) or keyword.issoftkeyword(package):
        found.append(f"package_name {package!r} is a Python keyword")
    elif package != package.lower() or package.startswith("_"):
        found.append(f"package_name {package!r} must be lowercase and not start with '_'")
    elif package in STDLIB:
        found.append(f"package_name {package!r} would shadow the standard-library module {package!r}")
    elif package in DEPENDENCIES:
        found.append(f"package_name {package!r} would shadow the dependency or folder {package!r}")
    if answers["license"] not in LICENSES:
        found.append(f"license {answers['license']!r} is not one of {', '.join(LICENSES)}")
    if answers["python_version"] not in PYTHONS:
        found.append(f"python_version {answers['python_version']!r} is not one of {', '.join(PYTHONS)}")
    if not EMAIL.match(answers["email"]):
        found.append(f"email {answers['email']!r} is not an e-mail address")
    return found


if __name__ == "__main__":
    if errors := problems(ANSWERS):
        for error in errors:
            print(f"error: {error}", file=sys.stderr)
        print("Nothing was generated. Fix the answers and run cookiecutter again.", file=sys.stderr)
        sys.exit(1)
