"""A tracker that cannot work stops the command before anything is written, with one `error:` line naming why:
a missing extra, a tracking URI that cannot work, an artifact root that cannot be written, a tracker id of another
run, a W&B run set online where W&B would find no credentials."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import servers
import yaml
from support import submodule
from tracker_setup import EXPERIMENT, LIMITS, clear_tracker_environment, forget_w_and_b, needs, tracker_flags

from runkit.testing.support import refused

checks = submodule("command.tracker_checks")


@pytest.fixture(autouse=True)
def _no_tracker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_tracker_environment(monkeypatch)
    forget_w_and_b(monkeypatch)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "error: trainer.logger: MLFlowLogger needs the `mlflow` extra: pip install -e '.[mlflow]'"),
        ("scheme", "error: trainer.logger.init_args.tracking_uri: 'htp://127.0.0.1:5000' is no MLflow tracking URI"),
        ("unreachable", "error: trainer.logger.init_args.tracking_uri: cannot reach MLflow at http://127.0.0.1:"),
        ("artifacts", "error: trainer.logger.init_args.artifact_location: cannot create a-file/artifacts: a-file is"),
        ("clash", "error: trainer.logger.init_args.id: 'abcd1234' is the wandb run of runs/fixture/other; resume"),
        ("no-key", "error: trainer.logger: WandbLogger logs online (offline: false) and W&B finds no API key: set"),
    ],
)
def test_a_tracker_that_cannot_work_is_one_error_line_and_writes_nothing(
    run_cli: Callable[..., Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str,
    expected: str,
) -> None:  # fmt: skip
    name = "wandb" if case in ("clash", "no-key") else "mlflow"
    needs(name)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # an unreachable server fails at once
    Path("a-file").write_text("")
    init_args = {
        "missing": {},
        "scheme": {"tracking_uri": "htp://127.0.0.1:5000"},
        "unreachable": {"tracking_uri": f"http://127.0.0.1:{servers.free_port()}"},
        "artifacts": {"artifact_location": "a-file/artifacts"},
        "clash": {"id": "abcd1234"},
        "no-key": {"offline": False},
    }[case]
    flags = tracker_flags(name, **{name: init_args})
    if case == "missing":
        monkeypatch.setattr(checks, "installed", lambda module: module != "mlflow")
    if case == "clash":  # another run of the experiment logs to that W&B id
        other = EXPERIMENT / "other"
        other.mkdir(parents=True)
        record = {"sessions": [{"started": "2026-01-01T00:00:00.000+00:00"}], "trackers": {"wandb": {"id": "abcd1234"}}}
        (other / "provenance.yaml").write_text(yaml.safe_dump(record))
    if case == "no-key":  # a machine where nobody ran `wandb login`
        for variable in ("HOME", "WANDB_CONFIG_DIR"):
            monkeypatch.setenv(variable, str(Path("a-file").resolve()))
        monkeypatch.delenv("NETRC", raising=False)
    before = sorted(Path().rglob("*"))
    assert refused(capsys, lambda: run_cli("fit", *LIMITS, flags)).startswith(expected)
    assert sorted(Path().rglob("*")) == before


def test_w_and_b_finds_a_key_where_wandb_login_leaves_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for variable in ("NETRC", "WANDB_CONFIG_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    assert not checks.wandb_key()
    (tmp_path / ".netrc").write_text("machine github.com login me password not-w-and-b\n")
    assert not checks.wandb_key()
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    assert checks.wandb_key()
    (tmp_path / ".netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef")
    assert checks.wandb_key()
    # Offline in the config or in W&B's own environment variable: no key needed.
    assert checks.wandb_online({"offline": False})
    assert not checks.wandb_online({"offline": True})
    assert not checks.wandb_online({"offline": False, "mode": "disabled"})
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert not checks.wandb_online({"offline": False})
