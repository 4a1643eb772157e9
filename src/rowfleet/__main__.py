"""``python -m rowfleet``: the command line."""

import sys

from rowfleet.cli import main

sys.exit(main())
