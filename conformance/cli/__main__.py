"""`python -m conformance.cli ...`: the `vtwin` command without the entry point."""

import sys

from conformance.cli.app import main

sys.exit(main())
