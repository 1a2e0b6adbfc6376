"""``python -m runkit``: the command line with no project of its own (no links, no starting configs); the kit's
own tests run it on their fixture task."""

from .entry import main

if __name__ == "__main__":
    main()
