"""Tells the user what to run next."""

import json

ANSWERS: dict[str, str] = json.loads(r"""{{ cookiecutter | jsonify }}""")

if __name__ == "__main__":
    package = ANSWERS["package_name"]
    print(
        f"\nGenerated {ANSWERS['project_slug']}/. Next:\n"
        f"  cd {ANSWERS['project_slug']} && pip install -e '.[dev]'\n"
        f"  {package} fit                         # the default run: configs/default.yaml\n"
        f"  {package} validate --ckpt_path best\n"
        "  pytest\n"
    )
