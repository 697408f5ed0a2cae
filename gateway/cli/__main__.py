"""`python -m gateway.cli` is `switchyard` (as `python -m gateway`)."""

import sys

from gateway.cli import main

sys.exit(main())
