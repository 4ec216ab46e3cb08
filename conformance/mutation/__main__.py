"""`python -m conformance.mutation run --max-minutes 60` (see `conformance.mutation.run`)."""

from conformance.mutation.run import main

raise SystemExit(main())
