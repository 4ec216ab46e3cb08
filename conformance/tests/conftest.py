"""Hypothesis profiles for the differential tests.

`default`: >= 200 examples per KV family (CI). `nightly`: >= 5,000. `quick`: a smoke pass.
Pick one with HYPOTHESIS_PROFILE=nightly (or pytest --hypothesis-profile nightly).
"""

import os

from hypothesis import HealthCheck, settings

_common = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "stateful_step_count": 40,
}
settings.register_profile("default", max_examples=200, **_common)
settings.register_profile("nightly", max_examples=5000, **_common)
settings.register_profile("quick", max_examples=25, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
