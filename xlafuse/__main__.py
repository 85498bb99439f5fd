"""`python -m xlafuse` runs the command line."""

import sys

from xlafuse.cli import main

sys.exit(main())
