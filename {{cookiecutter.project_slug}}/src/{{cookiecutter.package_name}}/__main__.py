"""``python -m`` entry point; the guard keeps it import-safe for spawn-based DataLoader workers."""

from .cli import main

if __name__ == "__main__":
    main()
