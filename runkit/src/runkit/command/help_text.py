"""What ``<package> <subcommand> --help`` shows first: a one-line usage, the settings people change most, then
every option under a title that says what its group is.

Lightning's help starts with a usage of ~55 lines (one per option) and titles each group with a class docstring:
the Trainer's is an internal note of the kit, the model's a class repr, the data's a sentence cut in half.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from jsonargparse import DefaultHelpFormatter

from ..bad_input import OneLineErrorParser
from ..subcommands import SUBCOMMANDS

EVALUATE = [
    ("--ckpt_path best", "the best checkpoint of the newest run (any experiment; its own config.yaml)"),
    ("-c runs/<exp>/<run>/config.yaml --ckpt_path last", "a given run's checkpoint (best, last or a file)"),
    ("--trainer.limit_{stage}_batches 10", "a part of the data"),
    ("--data.init_args.batch_size 256", "the task's own settings: --data.help CLASS lists them"),
]
MOST_USED: dict[str, list[tuple[str, str]]] = {
    "fit": [
        ("-c configs/<preset>.yaml", "a preset; several stack, a later one wins (configs/ holds them)"),
        ("--trainer.max_epochs 20", "how long (or --trainer.max_steps, --trainer.max_time 00:04:00:00)"),
        ("--trainer.devices 2 -c configs/distributed/ddp.yaml", "processes"),
        ("-c configs/precision/bf16.yaml", "precision"),
        ("--model.init_args.<arg> V, --data.init_args.<arg> V", "the task's own settings: --model.help CLASS"),
        ("--ckpt_path last", "continue the newest run; -c runs/<exp>/<run>/config.yaml picks one"),
        ("--run.experiment NAME, --run.name NAME", "where the run goes: runs/<experiment>/<name>/"),
        ("--best_checkpoint.monitor val/acc", "what best.ckpt follows (its mode follows the name)"),
        ("--print_config", "the whole resolved config, without running"),
    ],
    "validate": [(flag, text.format(stage="val")) for flag, text in EVALUATE],
    "test": [(flag.format(stage="test"), text) for flag, text in EVALUATE],
    "predict": [
        *[(flag.format(stage="predict"), text) for flag, text in EVALUATE[:3]],
        ("-c configs/predict/writer.yaml", "write the predictions into <run>/predictions/<time>/"),
    ],
    "export": [
        *EVALUATE[:2],
        ("--output_dir DIR", "where the exported files go (default: <run>/export/)"),
        ("--quantize int8_dynamic", "also a torchao int8 program, checked against the float model (quantization.json)"),
    ],
}
TITLES = {
    "trainer": "trainer: Lightning's Trainer (configs/default.yaml, then the presets under configs/)",
    "model": "model: the LightningModule (--model CLASS or class_path; --model.help CLASS lists its arguments)",
    "data": "data: the LightningDataModule (--data.help CLASS lists its arguments; --data null: the model's loaders)",
    "run": "run: the run folder, <trainer.default_root_dir>/<experiment>/<name>",
    "best_checkpoint": "best_checkpoint: checkpoints/best.ckpt, the best value of one metric (null: none)",
    "last_checkpoint": "last_checkpoint: checkpoints/last.ckpt, the newest state (what a resume continues)",
    "optimizer": "optimizer: for a model without configure_optimizers (--optimizer AdamW --optimizer.lr 0.001)",
    "lr_scheduler": "lr_scheduler: its schedule, with --optimizer (--lr_scheduler StepLR --lr_scheduler.step_size 10)",
}


class Formatter(DefaultHelpFormatter):
    """jsonargparse's, wrapping each line of a description on its own: the table of most used settings keeps its
    rows, and a long row goes on under its second column."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            row = re.match(r"(\s+\S.*?\s{2,})\S", line)
            hanging = " " * len(row[1]) if row else ""
            lines.append(textwrap.fill(line, max(width, 60), initial_indent=indent, subsequent_indent=indent + hanging))
        return "\n".join(lines)


class HelpfulParser(OneLineErrorParser):
    """The kit's parser, whose help titles each group by what it holds (``TITLES``)."""

    def format_help(self) -> str:
        for key, title in TITLES.items():
            if key in self.groups:
                self.groups[key].title = title
        if (subcommand := self.prog.rsplit(" ", 1)[-1]) in self.groups:
            self.groups[subcommand].title = f"{subcommand}: the command's own arguments"
        return super().format_help()


def subcommand_help(program: str, subcommand: str) -> dict[str, Any]:
    """The parser settings of one subcommand's help: its usage line and, first, what people set most."""
    settings: dict[str, Any] = {"usage": f"{program} {subcommand} [-c CONFIG]... [--KEY VALUE]..."}
    if rows := MOST_USED.get(subcommand):
        width = max(len(flag) for flag, _ in rows)
        table = "\n".join(f"  {flag.ljust(width)}  {text}" for flag, text in rows)
        settings["description"] = f"{SUBCOMMANDS[subcommand].summary}\n\nMost used (every option below):\n{table}"
    return settings
