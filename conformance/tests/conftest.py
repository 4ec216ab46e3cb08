"""Hypothesis profiles for the differential tests.

`default`: >= 200 examples per KV family (CI), derandomized so a CI run is reproducible.
`nightly`: >= 5,000, fresh examples each run. `quick`: a smoke pass.
Pick one with HYPOTHESIS_PROFILE=nightly (or pytest --hypothesis-profile nightly).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "vtwin-base",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    stateful_step_count=40,
)
_base = settings.get_profile("vtwin-base")
# CI: a fixed example set (reproducible gate); nightly explores fresh examples every run.
settings.register_profile("default", parent=_base, max_examples=200, derandomize=True)
settings.register_profile("nightly", parent=_base, max_examples=5000)
settings.register_profile("quick", parent=_base, max_examples=25)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
