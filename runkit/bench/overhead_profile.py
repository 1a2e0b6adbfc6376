"""Where the default run's extra time per step goes: the project's ``fit`` and the hand loop under cProfile.

Each side runs twice, for ``short`` and ``long`` steps (within one epoch); the per-step profile is the difference
of the two, divided by the extra steps, so one-time costs (setup, the sanity check, the first ``self.log``) drop
out. Prints the functions whose own time per step differs most between ``fit`` and the loop. cProfile slows both
sides by its per-call cost, most where calls are many (Lightning's loops): read the table as where, not how much.

    BENCH_PROJECT=build/dev .venv/bin/python bench/overhead_profile.py
"""

from __future__ import annotations

import cProfile
import pstats
import tempfile
from pathlib import Path

from jsonargparse import CLI
from overhead import build, fresh, hand_loop, project_fit, solo

PerStep = dict[str, tuple[float, float]]  # function -> (own seconds, calls) per step


def profiled(side_name: str, steps: int, workdir: Path) -> pstats.Stats:
    run_dir = fresh(workdir, f"{side_name}-")
    built = build(run_dir, f"--trainer.max_steps={steps}", "--trainer.accelerator=cpu", presets=())
    profile, side = cProfile.Profile(), solo(side_name)
    profile.enable()
    if side_name == "fit":
        project_fit(side, built)
    else:
        hand_loop(side, built, run_dir, steps, resumable=True)
    profile.disable()
    return pstats.Stats(profile)


def own_times(stats: pstats.Stats) -> dict[str, tuple[float, float]]:
    times: dict[str, tuple[float, float]] = {}
    for (file, line, name), (_, calls, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        key = f"{file.split('site-packages/')[-1].split('/src/')[-1]}:{line} {name}"
        seconds, count = times.get(key, (0.0, 0.0))
        times[key] = (seconds + own, count + calls)
    return times


def per_step(side_name: str, short: int, long: int, workdir: Path) -> PerStep:
    first, second = own_times(profiled(side_name, short, workdir)), own_times(profiled(side_name, long, workdir))
    extra = long - short
    return {
        key: ((seconds - first.get(key, (0.0, 0.0))[0]) / extra, (calls - first.get(key, (0.0, 0.0))[1]) / extra)
        for key, (seconds, calls) in second.items()
    }


def main(short: int = 30, long: int = 75, rows: int = 25) -> str:
    """Prints the table.

    Args:
        short: Steps of the first run of each side.
        long: Steps of the second run (at most one epoch of the default data: 78).
        rows: Functions to list.
    """
    with tempfile.TemporaryDirectory() as folder:
        fit, loop = per_step("fit", short, long, Path(folder)), per_step("loop", short, long, Path(folder))
    total_fit, total_loop = (1000 * sum(own for own, _ in side.values()) for side in (fit, loop))
    lines = [
        f"own time per step under cProfile: fit {total_fit:.2f} ms, loop {total_loop:.2f} ms",
        "| fit - loop, ms/step | calls/step, fit | calls/step, loop | function |",
        "|---|---|---|---|",
    ]
    ranked = sorted(((own - loop.get(k, (0.0, 0.0))[0], k, calls) for k, (own, calls) in fit.items()), reverse=True)
    for difference, key, calls in ranked[:rows]:
        lines.append(f"| {1000 * difference:+.3f} | {calls:.1f} | {loop.get(key, (0.0, 0.0))[1]:.1f} | `{key}` |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(CLI(main))
