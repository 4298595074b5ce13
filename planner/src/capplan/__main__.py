"""``python -m capplan``: the same entry point as the ``capplan`` script."""

from capplan.cli.main import main

main()
