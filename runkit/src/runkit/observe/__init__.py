"""What a run shows: gradient norm, throughput, epoch time, memory budget, model summary, progress, profiler."""
