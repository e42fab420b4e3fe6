"""``python -m paperbench``: the command line."""

from paperbench.cli import main

main()
