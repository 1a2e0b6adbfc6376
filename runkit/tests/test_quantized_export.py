"""``export --quantize``: torchao programs (and ONNX Runtime's int8 model) checked against the float model on the
validation set, in a fresh process, and timed; refused in one line where they cannot run."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import fixture_task
import lightning.pytorch as pl
import pytest
import torch
from support import TESTS, submodule
from torch import nn

from runkit.testing.support import fit_exit_code, refused, run_dir_flags

pytest.importorskip("torchao", reason="quantized export needs torchao (the `export` extra)")
quantize = submodule("tools.quantize")
quantized_export = submodule("tools.quantized_export")
program_checks = submodule("tools.program_checks")
model_inputs = submodule("tools.model_inputs")
HAS_ONNX = all(importlib.util.find_spec(name) for name in ("onnx", "onnxscript", "onnxruntime"))
FAST = ["--latency_repeats=2"]  # latency is recorded, never asserted: two calls are enough to fill the report
FOREIGN = ["--model=foreign.HydraStyleModule", "--data=foreign.HydraStyleData", "--model.hidden=64"]


@pytest.fixture(scope="module")
def run_dir(cli: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the fixture task: a regressor, ``SequenceRegressor`` (two Linear layers)."""
    run = tmp_path_factory.mktemp("quantize") / "runs" / "x" / "run"
    cli.build_cli(["fit", *run_dir_flags(run), "--trainer.max_epochs=1"])
    return run


@pytest.fixture
def foreign_config() -> Iterator[None]:
    """Commands start from the Trainer settings of the tests on foreign code: the module and data are its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "foreign.yaml"))
        yield


def export(cli: ModuleType, run_dir: Path, output_dir: Path, *flags: str) -> object:
    args = ["export", *run_dir_flags(run_dir), "--ckpt_path=best", f"--output_dir={output_dir}", *FAST]
    return cli.build_cli([*args, *flags])


def report(folder: Path) -> dict:
    return json.loads((folder / "quantization.json").read_text())


@pytest.mark.parametrize("mode", ["int8_weight_only", "int8_dynamic"])
def test_each_cpu_mode_writes_a_quantized_program_checked_and_timed(
    cli: ModuleType, run_dir: Path, in_tmp: Path, mode: str
) -> None:
    export(cli, run_dir, in_tmp / "out", f"--quantize={mode}", "--formats=[torch_export]")
    assert {path.name for path in (in_tmp / "out").iterdir()} == {"model.pt2", f"model.{mode}.pt2", "quantization.json"}
    program = torch.export.load(in_tmp / "out" / f"model.{mode}.pt2")
    weight = program.state_dict["net.0.weight"]
    assert weight.__tensor_flatten__()[0][0] == "qdata"
    assert weight.qdata.dtype == torch.int8
    inputs = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))  # not the traced batch size
    expected = torch.export.load(in_tmp / "out" / "model.pt2").module()(inputs)
    with torch.no_grad():
        outputs = program.module()(inputs)
    assert 0 < (outputs - expected).abs().max() < 0.05 * expected.abs().max()  # quantized: close, not equal

    recorded = report(in_tmp / "out")
    config = quantize.CONFIGS[mode]
    assert recorded["quantized_layers"] == {"net.0": config, "net.3": config}
    assert recorded["kept_float"] == {}
    assert set(recorded["files"]) == {"model.pt2", f"model.{mode}.pt2"}
    entry = recorded["files"][f"model.{mode}.pt2"]
    assert (entry["runtime"], entry["precision"], entry["float_file"]) == ("torch.export", mode, "model.pt2")
    assert entry["fresh_process_max_abs_diff"] == 0
    assert entry["score"]["metric"] == "relative_rms_error"
    assert entry["score"]["samples"] == 64  # the whole validation set
    assert 0 < entry["score"]["quantized_value"] <= 0.05
    # Linear(16, 32) and Linear(32, 1): 544 float32 weights and 33 biases. The weights become int8 with a float32
    # scale and an int8 zero point per output row; the biases stay float32.
    assert entry["float_weights_bytes"] == 4 * (544 + 33)
    assert entry["weights_bytes"] == 544 + 4 * 33 + 33 + 4 * 33
    assert entry["file_bytes"] == (in_tmp / "out" / f"model.{mode}.pt2").stat().st_size
    for timed in recorded["files"].values():
        assert [row["batch_size"] for row in timed["latency"]] == [1, 64]
        assert all(0 < row["q1_ms"] <= row["median_ms"] <= row["q3_ms"] for row in timed["latency"])
    assert recorded["files"]["model.pt2"]["latency_ratio"] == {"1": 1.0, "64": 1.0}  # the only float file
    recommended = recorded["recommended"]
    assert recommended["file"] in recorded["files"]
    if recommended["file"] == "model.pt2":  # the int8 program is slower at one batch size (run as it loads)
        assert max(entry["latency_ratio"].values()) >= 1
    assert recorded["latency_threads"] == 1  # the default: one thread holds still on a shared machine


def test_a_foreign_classifier_is_checked_by_accuracy_and_gets_an_int8_onnx_model(
    cli: ModuleType, in_tmp: Path, foreign_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run = in_tmp / "runs/foreign/run"
    assert fit_exit_code(cli, run, *FOREIGN, "--trainer.max_epochs=3") == 0
    formats = "[torch_export,onnx]" if HAS_ONNX else "[torch_export]"
    config = ["--config", str(run / "config.yaml"), "--ckpt_path=last", "--output_dir=out", *FAST]
    capsys.readouterr()
    # 64 validation samples: one is 1.56 points, so the bound here is 3 samples (ONNX Runtime's int8 lost 2 once).
    cli.build_cli(["export", *config, "--quantize=int8_dynamic", f"--formats={formats}", "--max_accuracy_drop=5"])
    printed = capsys.readouterr().out
    recorded = report(in_tmp / "out")
    quantized = {"model.int8_dynamic.pt2", *(["model.int8_dynamic.onnx"] if HAS_ONNX else [])}
    assert set(recorded["files"]) == {"model.pt2", *(["model.onnx"] if HAS_ONNX else []), *quantized}
    for entry in (recorded["files"][name] for name in quantized):
        checked = entry["score"]
        assert checked["metric"] == "accuracy"
        assert checked["samples"] == 64
        assert checked["float_value"] - checked["quantized_value"] <= recorded["bound"]["max_accuracy_drop"] == 5
        assert f"val accuracy {checked['quantized_value']:.2f}% (float {checked['float_value']:.2f}%)" in printed
        assert entry["float_weights_bytes"] == 4 * (8 * 64 + 64 * 4 + 64 + 4)
    # torchao: int8 weights, a float32 scale and an int8 zero point per output row, float32 biases.
    assert recorded["files"]["model.int8_dynamic.pt2"]["weights_bytes"] == (8 * 64 + 64 * 4) + 4 * 68 + 68 + 4 * 68
    if HAS_ONNX:
        assert (
            recorded["files"]["model.int8_dynamic.onnx"]["weights_bytes"] < 4 * (8 * 64 + 64 * 4 + 64 + 4) / 3
        )  # a scale per tensor
        session = program_checks.load_program(in_tmp / "out/model.int8_dynamic.onnx")
        assert session(torch.randn(3, 8)).shape == (3, 4)
    assert printed.strip().splitlines()[-1] == f"recommended: {recorded['recommended']['why']}"


def test_layers_torchao_cannot_quantize_stay_float_and_are_named() -> None:
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),  # one input channel: torchao's per-channel int8 for convolutions refuses it
        nn.Conv2d(8, 8, 3, padding=1),
        nn.Flatten(),
        nn.LayerNorm(8 * 4 * 4),
        nn.Linear(8 * 4 * 4, 10),
    )
    quantized = quantize.quantize_model(model, "int8_dynamic")
    assert quantized.layers == {"1": "IntxWeightOnlyConfig", "4": "Int8DynamicActivationInt8WeightConfig"}
    assert set(quantized.kept_float) == {"0", "3"}
    assert quantized.kept_float["0"].startswith("Conv2d weight (8, 1, 3, 3): torchao refused it (")
    assert quantized.kept_float["3"] == (
        "LayerNorm (weight, bias): torchao's int8_dynamic quantizes Linear and Conv2d layers only"
    )
    assert type(model[4].weight) is nn.Parameter  # the model itself stays float
    inputs = torch.randn(2, 1, 4, 4)
    with torch.no_grad():
        assert (quantized.module(inputs) - model(inputs)).abs().max() < 0.05


def export_main(cli: ModuleType, run_dir: Path, output_dir: Path, *flags: str) -> object:
    """``export`` as the console script runs it (``main``: a refusal exits 2 with one line)."""
    args = ["export", *run_dir_flags(run_dir), "--ckpt_path=best", f"--output_dir={output_dir}", *FAST]
    return cli.main([*args, *flags])


def test_a_score_outside_the_bound_is_one_error_line_with_both_numbers_and_leaves_nothing(
    cli: ModuleType, run_dir: Path, in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    worse = program_checks.Score("accuracy", 96.0, 95.25, 2000)
    monkeypatch.setattr(quantized_export, "score", lambda model, program, batches, like: worse)
    line = refused(
        capsys,
        lambda: export_main(cli, run_dir, in_tmp / "out", "--quantize=int8_dynamic", "--formats=[torch_export]"),
    )  # was a 33-line traceback
    assert line.endswith(
        "max_accuracy_drop: model.int8_dynamic.pt2: validation accuracy 95.25% against 96.00% float: 0.75 points lost"
        " > max_accuracy_drop=0.5; the export was not written"
    ), line
    assert list(in_tmp.iterdir()) == []  # no float file either: the export is written whole or not at all


def test_a_regressor_outside_its_bound_is_refused_in_one_line(
    cli: ModuleType, run_dir: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--quantize=int8_dynamic", "--formats=[torch_export]", "--max_output_error=1e-4"]
    line = refused(capsys, lambda: export_main(cli, run_dir, in_tmp / "out", *flags))
    assert re.search(
        r"max_output_error: model\.int8_dynamic\.pt2: .* relative RMS error of 0\.\d+ > max_output_error=0\.0001", line
    )
    assert list(in_tmp.iterdir()) == []


def test_the_fresh_process_imports_nothing_it_is_told_not_to(in_tmp: Path) -> None:
    path = in_tmp / "model.pt2"
    inputs = torch.randn(2, 4)
    torch.export.save(torch.export.export(nn.Linear(4, 2).eval(), (inputs,)), path)
    sample = model_inputs.ModelInputs(("input",), (inputs,))
    assert program_checks.check_fresh_process(path, sample, "cpu", ["runkit", "lightning"], atol=0) == 0
    with pytest.raises(RuntimeError, match=r"model\.pt2: does not run in a fresh process without the project: .*torch"):
        program_checks.check_fresh_process(path, sample, "cpu", ["torch"], atol=0)  # what loading it needs


class NoValidationSet(fixture_task.SequenceData):
    """The fixture task's data with predict batches to trace and no validation set to check a quantized program on."""

    val_dataloader = pl.LightningDataModule.val_dataloader


def no_torchao(name: str, *args: object) -> object:
    return None if name == "torchao" else FIND_SPEC(name, *args)


FIND_SPEC = importlib.util.find_spec


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--quantize=float8"], "quantize: float8 runs on a CUDA GPU only: pass --quantize_device cuda"),
        (["--quantize=int8_weight_only", "--formats=[onnx]"], "quantize: int8_weight_only quantizes torch_export"),
        (["--quantize=int4"], "int4"),
        (
            ["--quantize=int8_dynamic", "--latency_repeats=0"],
            "latency_repeats and calibration_batches must be >= 1 and latency_threads >= 0, got 0, 8, 1",
        ),
        (["--quantize=int8_dynamic", "--max_accuracy_drop=-1"], "max_accuracy_drop and max_output_error must be >= 0"),
        pytest.param(
            ["--quantize=int8_dynamic", "--quantize_device=cuda"],
            "quantize: int8_dynamic on cuda needs a CUDA GPU, and torch",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU"),
        ),
        (["--quantize=int8_dynamic", "no torchao"], "quantize: int8_dynamic needs torchao, which is not installed"),
        (
            ["--quantize=int8_dynamic", "--data=test_quantized_export.NoValidationSet"],
            "quantize: the data has no val_dataloader: a quantized program is checked against the float model",
        ),
    ],
)
def test_a_mode_that_cannot_run_here_is_refused_in_one_line_and_nothing_is_written(
    cli: ModuleType,
    run_dir: Path,
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    message: str,
) -> None:
    if "no torchao" in flags:
        flags = [flag for flag in flags if flag != "no torchao"]
        monkeypatch.setattr(importlib.util, "find_spec", no_torchao)
    args = ["export", *run_dir_flags(run_dir), "--ckpt_path=best", "--output_dir=out", "--formats=[torch_export]"]
    if any(flag.startswith("--formats") for flag in flags):
        args.remove("--formats=[torch_export]")
    assert message in refused(capsys, lambda: cli.main([*args, *flags]))
    assert list(in_tmp.iterdir()) == []


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["float8", "int8_dynamic", "int8_weight_only"])
def test_each_mode_on_a_cuda_gpu_is_checked_like_on_cpu(
    cli: ModuleType, run_dir: Path, in_tmp: Path, mode: str
) -> None:
    if mode == "float8" and torch.cuda.get_device_capability() < quantize.FLOAT8_CAPABILITY:
        pytest.skip(f"float8 needs compute capability >= 8.9, this GPU has {torch.cuda.get_device_capability()}")
    export(cli, run_dir, in_tmp / "out", f"--quantize={mode}", "--quantize_device=cuda", "--formats=[torch_export]")
    recorded = report(in_tmp / "out")
    entry = recorded["files"][f"model.{mode}.pt2"]
    assert recorded["device"] == "cuda"
    assert recorded["machine"]["gpu"]
    assert entry["fresh_process_max_abs_diff"] <= 1e-4
    assert 0 < entry["score"]["quantized_value"] <= 0.05
    if mode == "float8":  # float8 matmuls need both dimensions a multiple of 16: Linear(32, 1) stays float
        assert set(recorded["quantized_layers"]) == {"net.0"}
        assert recorded["kept_float"] == {
            "net.3": ("Linear weight (1, 32): torchao's Float8DynamicActivationFloat8WeightConfig skips this shape")
        }
    else:
        assert set(recorded["quantized_layers"]) == {"net.0", "net.3"}
    assert entry["weights_bytes"] < entry["float_weights_bytes"]


TOKENS = ["--model=token_task.TokenClassifier", "--data=token_task.TokenData"]


@pytest.mark.skipif(not HAS_ONNX, reason="the `export` extra is not installed")
def test_a_token_model_with_dict_inputs_is_exported_and_quantized_with_integer_ids(
    cli: ModuleType, in_tmp: Path, foreign_config: None
) -> None:
    run = in_tmp / "runs/foreign/run"
    assert fit_exit_code(cli, run, *TOKENS, "--trainer.max_epochs=2") == 0
    config = ["--config", str(run / "config.yaml"), "--ckpt_path=last", "--output_dir=out", *FAST]
    # Was `error: trainer: unhashable type: 'slice'`: no token-input model could be exported.
    cli.build_cli(["export", *config, "--quantize=int8_dynamic", "--max_accuracy_drop=3"])
    token_task = pytest.importorskip("token_task")
    model = token_task.TokenClassifier.load_from_checkpoint(run / "checkpoints/last.ckpt", weights_only=True).eval()
    batch = token_task.Tokens(5, seed=3)[:]  # 5 samples: not the traced batch size
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        expected = model(ids, mask)
    session = program_checks.load_program(in_tmp / "out/model.onnx")
    onnx_inputs = __import__("onnxruntime").InferenceSession(str(in_tmp / "out/model.onnx")).get_inputs()
    assert [(port.name, port.type) for port in onnx_inputs] == [
        ("input_ids", "tensor(int64)"), ("attention_mask", "tensor(int64)")
    ]  # fmt: skip
    torch.testing.assert_close(session(ids, mask), expected)
    torch.testing.assert_close(program_checks.load_program(in_tmp / "out/model.pt2")(ids, mask), expected)
    recorded = report(in_tmp / "out")
    for name in ("model.int8_dynamic.pt2", "model.int8_dynamic.onnx"):
        entry = recorded["files"][name]
        assert entry["score"]["metric"] == "accuracy"
        assert entry["score"]["samples"] == 128  # every validation batch, its labels read from the dict
        assert entry["score"]["float_value"] > 90  # learnt: the mask was read, the ids stayed integers
        assert entry["fresh_process_max_abs_diff"] <= 1e-4
    assert recorded["quantized_layers"] == {name: quantize.CONFIGS["int8_dynamic"] for name in ("head.0", "head.2")}
    assert "embed" in recorded["kept_float"]


def no_compiler(*args: object, **kwargs: object) -> None:
    raise RuntimeError("Failed to find a working C++ compiler\nsecond line")


@pytest.mark.skipif(not HAS_ONNX, reason="the `export` extra is not installed")
def test_int8_measures_each_path_that_builds_and_never_recommends_a_slower_or_bigger_file(
    cli: ModuleType,
    run_dir: Path,
    in_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A machine without a C++ compiler: AOTInductor's files are left out with the reason, ONNX Runtime's two int8
    files are checked and timed with both float files (the AOTInductor paths: test_int8_compiled_ahead_of_time)."""
    int8_paths = submodule("tools.int8_paths")
    monkeypatch.setattr(int8_paths, "compile_aoti", no_compiler)
    capsys.readouterr()
    export(cli, run_dir, in_tmp / "out", "--quantize=int8")
    printed = capsys.readouterr().out
    recorded = report(in_tmp / "out")
    assert recorded["rejected"] == {
        "model.aoti.pt2": "could not be built: RuntimeError: Failed to find a working C++ compiler",
        "model.int8.aoti.pt2": "could not be built: RuntimeError: Failed to find a working C++ compiler",
    }
    files = recorded["files"]
    assert set(files) == {"model.pt2", "model.onnx", "model.int8_dynamic.onnx", "model.int8_static.onnx"}
    assert {name for name in in_tmp.joinpath("out").iterdir()} >= {in_tmp / "out" / name for name in files}
    assert not (in_tmp / "out/model.int8.aoti.pt2").exists()
    for name in ("model.int8_dynamic.onnx", "model.int8_static.onnx"):
        entry = files[name]
        assert (entry["runtime"], entry["precision"], entry["float_file"]) == ("onnxruntime", "int8", "model.onnx")
        assert entry["file_bytes"] == (in_tmp / "out" / name).stat().st_size
        assert entry["float_file_bytes"] == sum(
            (in_tmp / "out" / part).stat().st_size for part in ("model.onnx", "model.onnx.data")
        )  # the whole float file: its external data included
        assert 0 < entry["score"]["quantized_value"] <= 0.05
    # The fastest float file at each batch size is 1.0; the others are measured against it.
    for size in ("1", "64"):
        assert min(files[name]["latency_ratio"][size] for name in ("model.pt2", "model.onnx")) == 1.0
    recommended = recorded["recommended"]
    chosen = files[recommended["file"]]
    ratios = list(chosen["latency_ratio"].values())
    assert recommended["latency_ratio"] == pytest.approx((ratios[0] * ratios[1]) ** 0.5, abs=1e-3)
    if chosen["precision"] == "int8":
        assert max(ratios) < 1  # faster at every batch size
        assert recommended["file_ratio"] <= 1
        assert recommended["score"] == chosen["score"]
    else:  # no int8 file faster at both batch sizes and smaller: the fastest float file, said with the numbers
        assert all(
            max(entry["latency_ratio"].values()) >= 1 or entry["file_ratio"] > 1
            for entry in files.values()
            if entry["precision"] == "int8"
        )
        assert "no int8 file is faster and smaller" in recommended["why"]
    assert printed.strip().splitlines()[-1] == f"recommended: {recommended['why']}"
    assert recommended["why"].startswith(f"ship {recommended['file']} ({chosen['runtime']}")


@pytest.mark.faults  # two AOTInductor compiles, ~30 s each on 2 idle cores
def test_int8_compiled_ahead_of_time(cli: ModuleType, run_dir: Path, in_tmp: Path) -> None:
    export(cli, run_dir, in_tmp / "out", "--quantize=int8", "--formats=[torch_export]")
    recorded = report(in_tmp / "out")
    files = recorded["files"]
    assert set(files) == {"model.pt2", "model.aoti.pt2", "model.int8.aoti.pt2"}, recorded["rejected"]
    assert files["model.aoti.pt2"]["runtime"] == files["model.int8.aoti.pt2"]["runtime"] == "aoti"
    entry = files["model.int8.aoti.pt2"]
    assert entry["float_file"] == "model.aoti.pt2"
    assert entry["fresh_process_max_abs_diff"] <= 1e-4
    assert 0 < entry["score"]["quantized_value"] <= 0.05
    inputs = torch.randn(5, 16, generator=torch.Generator().manual_seed(0))  # not the traced batch size
    program = program_checks.load_program(in_tmp / "out/model.aoti.pt2")
    expected = program_checks.load_program(in_tmp / "out/model.pt2")(inputs)
    torch.testing.assert_close(program(inputs), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_int8_on_a_cuda_gpu_compiles_torchao_ahead_of_time(cli: ModuleType, run_dir: Path, in_tmp: Path) -> None:
    export(cli, run_dir, in_tmp / "out", "--quantize=int8", "--quantize_device=cuda", "--formats=[torch_export]")
    recorded = report(in_tmp / "out")
    assert recorded["device"] == "cuda"
    assert set(recorded["files"]) == {"model.pt2", "model.aoti.pt2", "model.int8_torchao.aoti.pt2"}, recorded
    entry = recorded["files"]["model.int8_torchao.aoti.pt2"]
    assert (entry["runtime"], entry["float_file"]) == ("aoti", "model.aoti.pt2")
    assert entry["fresh_process_max_abs_diff"] <= 1e-4
    assert 0 < entry["score"]["quantized_value"] <= 0.05
    assert recorded["recommended"]["file"] in recorded["files"]
