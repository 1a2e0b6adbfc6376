"""Parts that configs name by class path: schedules, early stopping, the float32 matmul precision."""
