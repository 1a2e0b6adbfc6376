"""The PyTorch profiler used by ``configs/debug/profile.yaml``: a trace of a few steps and a table by self time."""

from __future__ import annotations

from lightning.pytorch.profilers import PyTorchProfiler


class Profiler(PyTorchProfiler):
    """Lightning's ``PyTorchProfiler``, which also accepts the self-time sort keys.

    Upstream rejects ``self_cpu_time_total``/``self_cuda_time_total``, though ``torch.profiler`` tables sort by
    them; self time names the operator that costs, where total time names the module that contains it.
    """

    AVAILABLE_SORT_KEYS = PyTorchProfiler.AVAILABLE_SORT_KEYS | {"self_cpu_time_total", "self_cuda_time_total"}
