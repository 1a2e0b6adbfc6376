"""What tests of a runkit project use: ``faults`` (callbacks that kill, signal or poison a run at a chosen step),
``probes`` (callbacks that record what happened, and readers for the results) and ``support`` (run the command
line in a process, compare checkpoints, expect a refusal). Named on a command line by class path
(``--trainer.callbacks+=runkit.testing.faults.SignalAtStep``), so every process of a run imports them."""
