"""``python -m waitbound`` runs the command line."""

from waitbound.cli import main

main()
