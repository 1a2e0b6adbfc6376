"""Code nobody here wrote runs with every guarantee: Lightning's demo classes and code in other templates' styles.

Each case trains as it is (nothing of the kit subclassed), resumes bit-exactly after a SIGTERM mid-epoch, is
listed by ``runs``, and is validated from its ``best``, its ``last`` and a checkpoint file, each command reading
the run's own ``config.yaml``. What the kit needs and a class does not give (no validation metric, no
``validation_step``) is one line, never a traceback. The README's table of foreign code comes from here.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import ModuleType

import pytest
import torch
from support import TESTS, submodule
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runkit.testing.faults import fault
from runkit.testing.support import assert_identical, fit_exit_code, last_checkpoint, refused

DEMOS = "lightning.pytorch.demos"
LIMITS = ["--trainer.max_epochs=2", "--trainer.limit_train_batches=4", "--trainer.limit_val_batches=4"]
CASES: dict[str, list[str]] = {
    "BoringModel": [f"--model={DEMOS}.BoringModel", f"--data={DEMOS}.BoringDataModule", *LIMITS],
    "DemoModel": [f"--model={DEMOS}.DemoModel", f"--data={DEMOS}.BoringDataModule", *LIMITS],
    # Its own loader of WikiText2, read from ./data/wikitext-2.txt (written by the test: a tiny corpus).
    "LightningTransformer": [f"--model={DEMOS}.LightningTransformer", "--model.vocab_size=32", "--data=null", *LIMITS],
    "hydra-style": [
        "--model=foreign.HydraStyleModule",
        "--model.scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau",
        "--model.scheduler.patience=0",
        "--data=foreign.HydraStyleData",
        "--trainer.max_epochs=3",
    ],
    "no-configure_optimizers": [
        "--model=foreign.BringsItsOwn",
        "--data=null",
        "--optimizer=torch.optim.Adam",
        "--optimizer.lr=0.01",
        "--lr_scheduler=torch.optim.lr_scheduler.StepLR",
        "--lr_scheduler.step_size=1",
        "--trainer.max_epochs=2",
    ],
    # torchdata's loader, 2 workers augmenting with the global torch RNG, a module reading estimated_stepping_batches.
    "StatefulDataLoader": [
        "--model=foreign.OneCycleModule",
        "--data=foreign.StatefulData",
        "--data.num_workers=2",
        "--trainer.max_epochs=2",
    ],
}
# What `validate` and `export` make of each case's run: True, or the one `error:` line's text (the README's table).
VALIDATE = {
    "BoringModel": True,  # it validates, but logs no metric: it has no best.ckpt, and one line says so at fit
    "DemoModel": "model: DemoModel has no validation_step(), which `validate` needs",
    "LightningTransformer": "model: LightningTransformer has no validation_step(), which `validate` needs",
    "hydra-style": True,
    "no-configure_optimizers": True,
    "StatefulDataLoader": True,
}
EXPORT = {
    "BoringModel": True,
    "DemoModel": True,
    "LightningTransformer": "data: LightningTransformer has no predict_dataloader() and model: LightningTransformer no"
    " example_input_array: `export` needs one of them for an input batch to trace",
    "hydra-style": True,
    "no-configure_optimizers": "data: BringsItsOwn has no predict_dataloader() and model: BringsItsOwn no"
    " example_input_array: `export` needs one of them for an input batch to trace",
    "StatefulDataLoader": True,
}
# What a case needs beyond the project's own dependencies (the dev extra installs it): without it the case skips.
REQUIRES = {"StatefulDataLoader": "torchdata.stateful_dataloader"}
EXACT = ("state_dict", "optimizer_states", "lr_schedulers", "global_step", "epoch")
CORPUS = " ".join(f"w{i % 30}" for i in range(4000))  # 30 words: within the model's vocabulary of 32


@pytest.fixture(autouse=True)
def _no_task_config(monkeypatch: pytest.MonkeyPatch, in_tmp: Path) -> None:
    """Commands start from the Trainer settings of the kit's tests only: no model, data or metric of theirs."""
    monkeypatch.setenv(submodule("project").DEFAULT_CONFIG_ENV, str(TESTS / "foreign.yaml"))
    (in_tmp / "data").mkdir()
    (in_tmp / "data" / "wikitext-2.txt").write_text(CORPUS)


@pytest.mark.parametrize("case", CASES)
def test_foreign_code_fits_resumes_exactly_is_listed_validated_and_exported(
    cli: ModuleType, in_tmp: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    if case in REQUIRES:
        pytest.importorskip(REQUIRES[case], reason=f"{case} needs {REQUIRES[case]} (the dev extra: torchdata)")
    args = CASES[case]
    straight, stopped = Path("runs/foreign/straight"), Path("runs/foreign/stopped")
    assert fit_exit_code(cli, straight, *args) == 0
    assert fit_exit_code(cli, stopped, *args, fault("SignalAtStep", step=3, signum=int(signal.SIGTERM))) == 143
    assert last_checkpoint(stopped)["global_step"] == 3
    assert fit_exit_code(cli, stopped, "--config", str(stopped / "config.yaml"), "--ckpt_path=last") == 0
    expected, resumed = last_checkpoint(straight), last_checkpoint(stopped)
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)
    capsys.readouterr()
    cli.main(["runs"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert {row[1]: row[4] for row in rows} == {"straight": "finished", "stopped": "finished"}

    # Every other command reads the run's own config.yaml; a checkpoint by alias or by file.
    config = ["--config", str(straight / "config.yaml")]
    ckpts = ["last", str(straight / "checkpoints" / "last.ckpt")]
    ckpts += ["best"] if (straight / "checkpoints" / "best.ckpt").is_file() else []
    for ckpt_path in ckpts:
        if VALIDATE[case] is True:
            validated = cli.build_cli(["validate", *config, f"--ckpt_path={ckpt_path}"])
            assert validated.trainer.state.finished
        else:
            assert refused(capsys, lambda c=ckpt_path: cli.main(["validate", *config, f"--ckpt_path={c}"])) == (
                f"error: {VALIDATE[case]}"
            )
    export = ["export", *config, "--ckpt_path=last", "--formats=[torch_export]", "--output_dir=exported"]
    if EXPORT[case] is True:
        cli.build_cli(export)
        assert Path("exported/model.pt2").is_file()
    else:
        assert refused(capsys, lambda: cli.main(export)) == f"error: {EXPORT[case]}"


@pytest.mark.parametrize(
    "stop",
    [  # before the epoch end's checkpoints; during their save (the stop then comes as the next epoch starts)
        fault("SignalAtEpochEnd", epoch=0),
        fault("SignalFromOutside", phase="checkpoint", signum=int(signal.SIGTERM), target="main"),
    ],
    ids=["epoch-end", "during-its-save"],
)
def test_a_stateful_loader_resumes_exactly_from_an_epoch_boundary(cli: ModuleType, in_tmp: Path, stop: str) -> None:
    # Lightning does not give a loader the position saved as an epoch ends: the next epoch took the first one's
    # order and other augmentation (weights 0.06 from a straight run) until the kit handed it over.
    pytest.importorskip(REQUIRES["StatefulDataLoader"], reason="StatefulDataLoader needs torchdata (the dev extra)")
    args = CASES["StatefulDataLoader"]
    straight, stopped = Path("runs/foreign/straight"), Path("runs/foreign/stopped")
    assert fit_exit_code(cli, straight, *args) == 0
    assert fit_exit_code(cli, stopped, *args, stop) == 143
    assert last_checkpoint(stopped)["global_step"] == 8
    assert fit_exit_code(cli, stopped, "--config", str(stopped / "config.yaml"), "--ckpt_path=last") == 0
    expected, resumed = last_checkpoint(straight), last_checkpoint(stopped)
    for key in EXACT:
        assert_identical(resumed[key], expected[key], key)


@pytest.mark.parametrize(
    ("flags", "monitor"),
    [
        (["--best_checkpoint.monitor=val/loss/dataloader_idx_1"], "val/loss/dataloader_idx_1"),
        ([], "val/loss/dataloader_idx_0"),  # no monitor: the loss of the first loader, the validation set
    ],
    ids=["named", "followed"],
)
def test_two_validation_loaders_best_ckpt_follows_one_of_them(
    cli: ModuleType, in_tmp: Path, lightning_log: list[str], flags: list[str], monitor: str
) -> None:
    # The check of the monitor read Lightning's callback metrics at the end of the sanity check, empty there with
    # several loaders: the named metric was refused ("its validation logs nothing"), the followed one switched off.
    run = Path("runs/foreign/two")
    args = ["--model=foreign.TwoSetsModule", "--data=foreign.TwoValidationSets", "--trainer.max_epochs=4", *flags]
    assert fit_exit_code(cli, run, *args) == 0
    (events,) = run.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    values = [event.value for event in accumulator.Scalars(monitor)]
    assert len(values) == 4
    state = last_checkpoint(run)["callbacks"]["BestCheckpoint"]
    assert (state["monitor"], state["mode"]) == (monitor, "min")
    assert float(state["best_model_score"]) == pytest.approx(min(values))
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["epoch"] == values.index(min(values))
    if not flags:
        assert any(f"best_checkpoint: follows {monitor} (min)" in line for line in lightning_log)


@pytest.mark.slow  # torch.compile: tens of seconds on a CPU
def test_a_module_compiling_its_network_in_setup_resumes_and_validates(cli: ModuleType, in_tmp: Path) -> None:
    # Its own checkpoints hold `_orig_mod.` keys, which the model has only after `setup`: the kit compared them with
    # the model before, and refused the run's last.ckpt as "written by a different model".
    run = Path("runs/foreign/compiled")
    args = ["--model=foreign.CompiledInSetup", "--data=foreign.HydraStyleData", "--trainer.max_epochs=2"]
    assert fit_exit_code(cli, run, *args, fault("SignalAtStep", step=3, signum=int(signal.SIGTERM))) == 143
    assert "net._orig_mod.0.weight" in last_checkpoint(run)["state_dict"]
    assert fit_exit_code(cli, run, "--config", str(run / "config.yaml"), "--ckpt_path=last") == 0
    assert last_checkpoint(run)["global_step"] == 16  # 2 epochs of 128 samples in batches of 16
    for ckpt_path in ("last", "best"):  # `validate` builds it uncompiled (`setup` compiles only to fit)
        validated = cli.build_cli(["validate", "--config", str(run / "config.yaml"), f"--ckpt_path={ckpt_path}"])
        assert validated.trainer.state.finished
        assert "net.0.weight" in validated.model.state_dict()
    export = ["export", "--config", str(run / "config.yaml"), "--ckpt_path=last", "--formats=[torch_export]"]
    cli.build_cli([*export, "--output_dir=exported"])
    assert Path("exported/model.pt2").is_file()


def test_a_network_loaded_in_eval_mode_is_said_with_its_count_of_modules(
    cli: ModuleType, in_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # from_pretrained returns a model in eval mode: the whole run trained with dropout off, said by one warning of
    # Lightning's among its start-up lines. The kit says it in a line of its own, with the modules' counts.
    args = ["--data=foreign.HydraStyleData", "--trainer.max_epochs=1", "--trainer.limit_train_batches=2"]
    assert fit_exit_code(cli, Path("runs/foreign/eval"), "--model=foreign.LoadedInEvalMode", *args) == 0
    said = [r.getMessage() for r in caplog.records if "modules are in eval mode as training starts" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert said[0].startswith("model: 5 of 11 modules are in eval mode as training starts, 1 of them train differently")
    assert "(1 Dropout)" in said[0]
    caplog.clear()
    assert fit_exit_code(cli, Path("runs/foreign/train"), "--model=foreign.HydraStyleModule", *args) == 0
    assert "eval mode as training starts" not in caplog.text  # a module in train mode: nothing said
