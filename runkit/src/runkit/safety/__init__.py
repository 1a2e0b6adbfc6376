"""What keeps a run's state whole: checkpoints, exact resume, resumable data, preemption, the non-finite stops."""
