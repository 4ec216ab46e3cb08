"""Hypothesis profiles and seeding for the differential tests.

`default` (CI): >= 200 examples per KV family, random on every run: a fixed example set would
check the same few hundred workloads forever and hide what the space still holds. Each run
prints its seed in pytest's header; failures are saved to the example database
(`.hypothesis/examples`) and replayed first by every later run on that machine. Reproduce a run
with `VTWIN_HYPOTHESIS_SEED=N` (same seed, same examples, empty database) and make a found
divergence permanent with `vtwin conform --workload FILE --emit-regression conformance/regressions`.
`nightly`: >= 5,000 examples. `quick`: a smoke pass. Pick one with HYPOTHESIS_PROFILE=nightly
(or pytest --hypothesis-profile nightly).
"""

import os

# Hashes are compared across the two systems, and each derives NONE_HASH from PYTHONHASHSEED;
# unset, xxhash would draw a random seed per system (test_sched_none_hash checks that case).
os.environ.setdefault("PYTHONHASHSEED", "0")
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

settings.register_profile(
    "vtwin-base",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    stateful_step_count=40,
    print_blob=True,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
)
_base = settings.get_profile("vtwin-base")
settings.register_profile("default", parent=_base, max_examples=200)
settings.register_profile("nightly", parent=_base, max_examples=5000)
settings.register_profile("quick", parent=_base, max_examples=25)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


RUN_SEED = int(os.environ.get("VTWIN_HYPOTHESIS_SEED") or random.SystemRandom().getrandbits(32))
os.environ["VTWIN_HYPOTHESIS_SEED"] = str(RUN_SEED)  # pytest-xdist workers share the seed


def _seed_hypothesis(seed: int) -> None:
    """Seed the generator Hypothesis draws each test's seed from. Not `--hypothesis-seed`:
    a forced seed switches the example database off, and replaying saved failures first
    matters more. The hook is Hypothesis-internal, so its absence only loses reproducibility
    by seed (the database and the printed blobs still reproduce failures)."""
    from hypothesis import core

    local = getattr(core, "threadlocal", None)
    if local is not None and hasattr(local, "_hypothesis_global_random"):
        local._hypothesis_global_random = random.Random(seed)


def pytest_report_header(config: pytest.Config) -> str:
    return (f"hypothesis: profile {settings.get_current_profile_name()}, run seed {RUN_SEED} "
            f"(reproduce: VTWIN_HYPOTHESIS_SEED={RUN_SEED}), failures replayed from "
            ".hypothesis/examples")


def pytest_sessionstart(session: pytest.Session) -> None:
    _seed_hypothesis(RUN_SEED)


def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis example counts per test into junit (`conformance.ci.hypothesis_counts`): the
    report index shows them per area. A line on the console while one test runs past 30 s
    (`conformance.ci.heartbeat`), so a long test does not read as a hang."""
    for plugin in ("conformance.ci.hypothesis_counts", "conformance.ci.heartbeat"):
        if not config.pluginmanager.has_plugin(plugin):
            config.pluginmanager.import_plugin(plugin)


# -- the reference system ------------------------------------------------------------------
# The scheduler-level differential tests (suite, regressions, generated workloads) compare the
# twin with `--against SPEC` (default `upstream`, the vLLM installed here; CI also runs them
# with `--against vllm==0.33.0`, a worker under `vtwin env create`'s environment). The twin
# follows that release (`conformance.systems.specs.follow_release`). One reference system per
# session: a worker starts once, not once per workload.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--against", default=os.environ.get("VTWIN_AGAINST", "upstream"),
                     metavar="SPEC", help="the reference system of the scheduler-level "
                     "differential tests (a spec: upstream, vllm==X.Y.Z, ...; default upstream)")


@pytest.fixture(scope="session")
def pair(request: pytest.FixtureRequest) -> Any:
    against = str(request.config.getoption("--against"))
    from conformance.tests.reference import Pair, needs_reference

    needs_reference(against)
    built = Pair(against)
    yield built
    built.close()
