"""`python -m ridgeline`."""

import sys

from ridgeline.cli import main

sys.exit(main())
