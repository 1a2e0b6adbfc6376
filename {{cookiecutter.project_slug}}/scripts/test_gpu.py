"""Every GPU-only test in one run (``make test-gpu``): the results, with the machine, go to one file.

    python scripts/test_gpu.py                        # writes gpu-results.txt; 10 minutes at most on one GPU
    python scripts/test_gpu.py --output results.txt

Runs the tests marked ``gpu`` (mixed precision with a GradScaler and clipping, FSDP, compile on CUDA, peak memory,
the matmul precision, cuDNN autotuning, the CUDA throughput row: tokens/s and MFU), with pytest's report of every
test and what the measuring ones printed. Without a CUDA GPU it writes that it skipped, and exits 0.
"""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from jsonargparse import CLI

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    """One line: the GPU(s), torch and CUDA versions, Python."""
    gpus = ", ".join(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())) or "no GPU"
    return f"{gpus}; torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}"


def main(output: Path = Path("gpu-results.txt"), timeout: int = 600) -> int:
    """Runs the ``gpu`` tests and writes pytest's report to ``output``; returns pytest's exit status.

    Args:
        output: The results file.
        timeout: Seconds before the run is stopped (its report so far is kept).
    """
    if not torch.cuda.is_available():
        output.write_text("test-gpu: skipped: no CUDA GPU on this machine\n")
        print(output.read_text(), end="")
        return 0
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-rA", "-p", "no:cacheprovider", "--durations=10"]
    start = time.perf_counter()
    with open(output, "w") as out:
        out.write(f"test-gpu: {machine()}\n$ {' '.join(command[1:])}\n\n")
        out.flush()
        try:
            status = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            status = 124
            out.write(f"\ntest-gpu: stopped after {timeout} s\n")
        out.write(f"\ntest-gpu: exit status {status} after {time.perf_counter() - start:.0f} s\n")
    print(f"test-gpu: exit status {status}; results in {output}")
    return status


if __name__ == "__main__":
    sys.exit(CLI(main))
