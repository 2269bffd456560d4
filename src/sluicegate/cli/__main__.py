"""``python -m sluicegate.cli``: the same command line as the ``sluicegate`` script."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    main()
