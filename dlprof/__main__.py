"""``python -m dlprof`` is the ``dlprof`` command."""

from dlprof.cli import main

if __name__ == "__main__":
    main()
