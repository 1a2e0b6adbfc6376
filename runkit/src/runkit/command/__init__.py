"""The command line: the CLI class and its subcommands, and the checks before a command runs (``run/`` is the run
itself: its folder and record)."""
