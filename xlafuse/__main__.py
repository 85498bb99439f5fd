"""`python -m xlafuse` runs the command line."""

from xlafuse.cli import console_main

console_main()
