"""What the example's tests share: its small run (the example's data cut to a few hundred images)."""

from __future__ import annotations

from support import SMALL_RUN as ANY_TASK_SMALL_RUN

SMALL_RUN = (*ANY_TASK_SMALL_RUN, "example/small_data")  # the example in seconds: a few batches of 256 generated images
