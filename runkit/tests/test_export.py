"""``export``: torch.export and ONNX files that reproduce the checkpoint's eager outputs."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import fixture_task
import pytest
import torch
import yaml
from support import submodule

from runkit.testing.support import refused, run_dir_flags

exporting = submodule("tools.export")
WRITTEN = {"torch_export": {"model.pt2"}, "onnx": {"model.onnx", "model.onnx.data"}}  # ONNX weights sit beside it
HAS_ONNX = all(importlib.util.find_spec(name) for name in ("onnx", "onnxscript", "onnxruntime"))


@pytest.fixture(scope="module")
def run_dir(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("export") / "run"
    cli.build_cli(["fit", *run_dir_flags(run), "--trainer.max_epochs=1"])
    return run


def eager_outputs(checkpoint: Path, inputs: torch.Tensor) -> torch.Tensor:
    model = fixture_task.SequenceRegressor.load_from_checkpoint(checkpoint, map_location="cpu", weights_only=True)
    with torch.no_grad():
        return model.eval()(inputs)


def export(cli: ModuleType, run_dir: Path, output_dir: Path, *flags: str) -> object:
    """``export --ckpt_path best`` of the run in ``run_dir``; ``flags`` may name another checkpoint."""
    args = ["export", *run_dir_flags(run_dir), "--ckpt_path=best", f"--output_dir={output_dir}"]
    return cli.build_cli([*args, *flags])


@pytest.mark.parametrize(
    "export_format",
    [
        "torch_export",
        pytest.param("onnx", marks=pytest.mark.skipif(not HAS_ONNX, reason="the `export` extra is not installed")),
    ],
)
def test_exported_file_reproduces_the_checkpoint(
    cli: ModuleType, run_dir: Path, in_tmp: Path, export_format: str
) -> None:
    export(cli, run_dir, in_tmp / "out", f"--formats=[{export_format}]")
    assert {file.name for file in (in_tmp / "out").iterdir()} == WRITTEN[export_format]
    path = in_tmp / "out" / exporting.FILE_NAMES[export_format]
    inputs = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))  # not the traced batch size
    best = run_dir / "checkpoints/best.ckpt"
    torch.testing.assert_close(exporting.run_exported(path, inputs), eager_outputs(best, inputs))


def test_a_mismatch_fails_the_export(
    cli: ModuleType, run_dir: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = exporting.run_exported
    monkeypatch.setattr(exporting, "run_exported", lambda path, inputs: real(path, inputs) + 1e-3)
    with pytest.raises(RuntimeError, match=r"model\.pt2: outputs differ from eager by 0\.001 > atol=0\.0001"):
        export(cli, run_dir, in_tmp / "out", "--formats=[torch_export]")
    assert list(in_tmp.iterdir()) == []  # no model.pt2 that fails its check, no temporary folder


@pytest.mark.parametrize(
    ("flag", "message"),
    [("--formats=[tflite]", "tflite"), ("--ckpt_path=missing.ckpt", "missing.ckpt: no such checkpoint file")],
)
def test_bad_export_arguments_exit_2(
    cli: ModuleType, run_dir: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str], flag: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        export(cli, run_dir, in_tmp / "out", flag)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert list(in_tmp.iterdir()) == []  # nothing written


def test_a_second_export_into_a_folder_being_written_is_refused_in_one_line(
    cli: ModuleType, run_dir: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two exports into one folder at the same moment both said they succeeded, and one's files were gone: the
    second is refused while the first (here a live process holding the folder's lock) runs, and a lock whose
    holder died is taken over."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        lock = in_tmp / ".out.lock"
        lock.write_text(yaml.safe_dump({"host": socket.gethostname(), "pid": holder.pid, "since": "now"}))
        args = ["export", *run_dir_flags(run_dir), "--ckpt_path=best", f"--output_dir={in_tmp / 'out'}"]
        line = refused(capsys, lambda: cli.main([*args, "--formats=[torch_export]", "--overwrite=true"]))
        assert line.endswith(
            f"output_dir: {in_tmp / 'out'} is being written by another export (process {holder.pid} on"
            f" {socket.gethostname()} (since now)): wait for it to end, then pass --overwrite true to replace it, or"
            " give another --output_dir"
        ), line
        assert sorted(path.name for path in in_tmp.iterdir()) == [".out.lock"]  # nothing of this export
    finally:
        holder.kill()
        holder.wait()
    export(cli, run_dir, in_tmp / "out", "--formats=[torch_export]")  # its holder is gone: taken over
    assert sorted(path.name for path in in_tmp.iterdir()) == ["out"]  # and given back
    assert {path.name for path in (in_tmp / "out").iterdir()} == WRITTEN["torch_export"]
