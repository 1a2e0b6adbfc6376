"""The command line: the CLI class and its subcommands, run folders and provenance, checks before a command runs."""
