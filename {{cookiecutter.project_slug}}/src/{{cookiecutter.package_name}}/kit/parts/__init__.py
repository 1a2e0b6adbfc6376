"""Parts that configs name by class path: schedules, early stopping."""
