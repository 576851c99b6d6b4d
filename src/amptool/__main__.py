"""``python -m amptool`` runs the command line."""
from amptool.cli import main

main()
