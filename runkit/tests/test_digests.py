"""Checkpoint digests: every checkpoint the kit writes has its SHA-256 in the run's record, and a file whose bytes
changed since (one bit in a tensor's data, which ``torch.load`` does not notice) is refused with one line naming it;
a crash at any point of a write leaves a checkpoint that loads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml
from support import PACKAGE, submodule

from runkit.testing.support import assert_identical, digest, launch, refused, run_dir_flags

checkpoint_io = submodule("safety.checkpoint_io")
digests = submodule("safety.digests")
LAST = "checkpoints/last.ckpt"


@pytest.fixture(scope="module")
def trained(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the fixture task (one epoch), to be copied by each test that changes it."""
    run_dir = tmp_path_factory.mktemp("digests") / "runs" / "fixture" / "trained"
    cli.build_cli(["fit", *run_dir_flags(run_dir), "--trainer.max_epochs=1"])
    return run_dir


@pytest.fixture
def run(trained: Path, in_tmp: Path) -> Path:
    return Path(shutil.copytree(trained, in_tmp / "runs" / "fixture" / "run"))


def entries(run: Path) -> dict[str, Any]:
    return yaml.safe_load((run / "provenance.yaml").read_text())["checkpoints"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flip_a_bit_in_a_tensor(path: Path) -> None:
    """Flips one bit in the middle of the largest tensor's bytes, as a failing disk would: the archive stays valid."""
    with zipfile.ZipFile(path) as archive:
        largest = max((info for info in archive.infolist() if "/data/" in info.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as file:
        file.seek(largest.header_offset + 26)  # the local header's name and extra field lengths
        header = file.read(4)
        start = largest.header_offset + 30 + int.from_bytes(header[:2], "little") + int.from_bytes(header[2:], "little")
        file.seek(start + largest.file_size // 2)
        byte = file.read(1)[0]
        file.seek(-1, 1)
        file.write(bytes([byte ^ 0x10]))


def test_every_checkpoint_the_kit_writes_is_recorded_with_its_digest_size_and_step(trained: Path) -> None:
    recorded = entries(trained)
    assert sorted(recorded) == ["checkpoints/best.ckpt", "checkpoints/last.ckpt"]
    for name, entry in recorded.items():
        path = trained / name
        assert entry == {
            "sha256": sha256(path),
            "size": path.stat().st_size,
            "step": torch.load(path, weights_only=True)["global_step"],
        }
    assert "checkpoints" not in torch.load(trained / LAST, weights_only=True)["provenance"]  # of files, not of itself


def test_a_flipped_bit_is_refused_with_one_line_naming_the_file_and_nothing_is_written(
    cli: ModuleType, run: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = run / LAST
    intact, expected = torch.load(last, weights_only=True), entries(run)["checkpoints/last.ckpt"]["sha256"]
    cli.build_cli(["validate", *run_dir_flags(run), "--ckpt_path=last"])  # intact: it passes
    flip_a_bit_in_a_tensor(last)
    flipped = torch.load(last, weights_only=True)  # torch checks no CRC: the changed number loads silently
    with pytest.raises(AssertionError):
        assert_identical(flipped, intact)
    found = sha256(last)
    before = digest(in_tmp)
    commands: list[list[str]] = [
        ["fit", *run_dir_flags(run), "--ckpt_path=last"],
        ["fit", f"--ckpt_path={last}"],  # a new run from the file: none is created
        *([command, f"--ckpt_path={last}"] for command in ("validate", "test", "predict")),
        ["export", "--formats=[torch_export]", f"--ckpt_path={last}"],
    ]
    for command in commands:
        line = refused(capsys, lambda command=command: cli.main(command))
        assert line == (
            f"error: checkpoint {last} is not the file its run wrote: its SHA-256 is {found},"
            f" {run / 'provenance.yaml'} recorded {expected} (step {intact['global_step']}). Its bytes changed after"
            " the write (a failing disk, a damaged copy, an edit); use another checkpoint, or, to load it anyway,"
            f" delete its entry under `checkpoints` in {run / 'provenance.yaml'}"
        ), command
    assert digest(in_tmp) == before
    with pytest.raises(ValueError, match=f"checkpoint {last} is not the file its run wrote"):
        checkpoint_io.AtomicCheckpointIO().load_checkpoint(last)  # Lightning's own read, for a fit called in code


def test_a_checkpoint_without_a_record_loads_unchecked_and_says_so_in_one_line(
    cli: ModuleType, run: Path, in_tmp: Path, lightning_log: list[str]
) -> None:
    flip_a_bit_in_a_tensor(run / LAST)
    with pytest.raises(SystemExit):
        cli.main(["validate", f"--ckpt_path={run / LAST}"])  # in its run: refused
    assert not [line for line in lightning_log if "not checked" in line]

    def unchecked(path: Path) -> list[str]:
        lightning_log.clear()
        assert cli.build_cli(["validate", f"--ckpt_path={path}"]).trainer.callback_metrics["val/loss"] > 0
        return [line for line in lightning_log if "not checked against a digest" in line]

    elsewhere = Path(shutil.copy(run / LAST, in_tmp / "elsewhere.ckpt"))  # handed on outside its run
    assert unchecked(elsewhere) == [  # once, though the command line and Lightning both read it
        f"checkpoint {elsewhere}: not checked against a digest (it is not inside a run folder with a provenance.yaml);"
        " it loads as it is"
    ]
    record_file = run / "provenance.yaml"
    record = yaml.safe_load(record_file.read_text())
    record["checkpoints"]["checkpoints/last.ckpt"] = "lost"  # a malformed entry
    record_file.write_text(yaml.safe_dump(record, sort_keys=False))
    assert unchecked(run / LAST) == [
        f"checkpoint {run / LAST}: not checked against a digest (its entry under `checkpoints` in {record_file} is"
        " not a digest); it loads as it is"
    ]
    del record["checkpoints"]["checkpoints/last.ckpt"]  # what the error line says to do to load it anyway
    record_file.write_text(yaml.safe_dump(record, sort_keys=False))
    digests._UNCHECKED.clear()  # said once per file and process: this process said it of this file already
    assert unchecked(run / LAST) == [
        f"checkpoint {run / LAST}: not checked against a digest ({record_file} has no entry for it under"
        " `checkpoints`); it loads as it is"
    ]


class Killed(BaseException):
    """Stands for a SIGKILL: the test puts back the files as they were when it was raised."""


@pytest.mark.parametrize("moment", ["before-rename", "after-rename"])
def test_a_writer_killed_between_checkpoint_and_record_leaves_a_checkpoint_that_loads(
    cli: ModuleType, in_tmp: Path, moment: str
) -> None:
    run = in_tmp / "runs" / "fixture" / "killed"
    replace, renames, at_kill = os.replace, [], {}

    def replace_or_die(source: Any, target: Any) -> None:
        """Kills the process at the rename of the second last.ckpt (step 4), just before it or just after it."""
        renames.append(Path(target).name)
        dies = renames.count("last.ckpt") == 2 and Path(target).name == "last.ckpt"
        if dies and moment == "after-rename":
            replace(source, target)
        if dies:
            at_kill["record"] = (run / "provenance.yaml").read_bytes()
            raise Killed
        replace(source, target)

    flags = [*run_dir_flags(run), "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
    flags.append("--model.init_args.schedule=step")  # continued past its planned epochs (onecycle's are fixed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", replace_or_die)
        with pytest.raises(Killed):
            cli.build_cli(["fit", *flags])
    (run / "provenance.yaml").write_bytes(at_kill["record"])  # what the process wrote after its kill never was
    assert torch.load(run / LAST, weights_only=True)["global_step"] == (2 if moment == "before-rename" else 4)
    entry = entries(run)["checkpoints/last.ckpt"]
    resumed = cli.build_cli(["fit", *flags, "--ckpt_path=last", "--trainer.max_epochs=3"])  # loads, and writes
    assert resumed.trainer.global_step == 6  # three epochs of two steps
    assert (entry["step"], entry["pending"]["step"]) == (2, 4)  # it was killed between the record's two writes
    assert entries(run)["checkpoints/last.ckpt"] == {
        "sha256": sha256(run / LAST),
        "size": (run / LAST).stat().st_size,
        "step": 6,
    }


@pytest.mark.parametrize("numbers", [1_000, 3_000_000], ids=["small-chunks", "overlapped-chunks"])
def test_the_digest_computed_while_writing_is_the_files(tmp_path: Path, numbers: int) -> None:
    told: list[Any] = []
    path = tmp_path / "x.ckpt"
    checkpoint_io.atomic_save({"state_dict": {"w": torch.randn(numbers)}}, path, told.append)
    assert told == [(sha256(path), path.stat().st_size)]


@pytest.mark.slow
def test_under_ddp_rank_0_records_and_each_process_checks_alone(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "fixture" / "ddp"
    ddp = ["--trainer.devices=2", "--trainer.strategy=ddp", "--trainer.accelerator=cpu", *run_dir_flags(run)]
    trained = launch(PACKAGE, "fit", *ddp, "--trainer.max_epochs=1", cwd=tmp_path)  # Lightning starts rank 1
    assert trained.returncode == 0, trained.stdout[-3000:]
    for name, entry in entries(run).items():
        assert (entry["sha256"], entry["size"]) == (sha256(run / name), (run / name).stat().st_size)
    flip_a_bit_in_a_tensor(run / LAST)
    before = digest(run)
    # Under torchrun both processes start alone, and each refuses before the process group exists: none waits.
    torchrun = ["--standalone", "--nproc-per-node=2", "-m", PACKAGE, "fit", *ddp, "--ckpt_path=last"]
    refused_by_both = launch("torch.distributed.run", *torchrun, cwd=tmp_path, timeout=240)
    lines = [line for line in refused_by_both.stdout.splitlines() if line.startswith("error: checkpoint")]
    assert len(lines) == 2, refused_by_both.stdout[-3000:]
    assert all(line.startswith(f"error: checkpoint {run / LAST} is not the file its run wrote") for line in lines)
    assert refused_by_both.stdout.count("exitcode: 2") >= 1  # torchrun names a worker's exit status
    assert digest(run) == before
