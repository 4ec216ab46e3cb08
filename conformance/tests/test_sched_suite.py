"""The default suite, one test per workload: the twin must match the reference exactly (every
field of every step), unless its first divergence is a known one for the pair. The reference is
`--against` (default: upstream vLLM 0.32.0 installed here; CI also runs vllm==0.33.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.sched.conform import judge
from conformance.sched.divergences import DEFAULT_PATH, load_known, stale_entries
from conformance.sched.pd_pair import run_instances
from conformance.sched.suite import SUITE, regression_files
from conformance.tests.reference import Pair
from workloads import load

pytestmark = pytest.mark.oracle
LEVEL = "exact"


@pytest.mark.parametrize("name", list(SUITE))
def test_default_suite_workload_reaches_exact(name: str, pair: Pair) -> None:
    entry = SUITE[name]
    workload = entry.make()
    known = [k for k in load_known(DEFAULT_PATH) if k.for_pair("impl", pair.against)]
    # One result, or a P/D pair's two (each instance compared on its own).
    results = run_instances(workload, pair.twin, pair.reference,
                            integrity_every=entry.integrity_every)
    waivers = []
    for result in results:
        assert result.error is None, f"{result.error}\n{result.error_detail}"
        assert result.stall is None or result.stall.agreed, result.stall
        verdict, waiver = judge(result, LEVEL, known)
        waivers += [waiver] if waiver else []
        divergence = result.divergence_at(LEVEL)
        if verdict not in ("passed", "known") and divergence is not None:
            pytest.fail(f"{result.workload}: {divergence.summary()} (requests "
                        f"{', '.join(divergence.requests[:8])}; level reached: "
                        f"{result.level_reached or 'none'}; run `vtwin conform --workload "
                        f"{name}` for the side-by-side report)", pytrace=False)
    stale = stale_entries(known, LEVEL, [r.workload for r in results], waivers)
    assert not stale, f"stale known divergences: {[k.id for k in stale]}"


@pytest.mark.parametrize("path", regression_files(), ids=lambda p: Path(p).stem)
def test_regression_workload_reaches_exact(path: str, pair: Pair) -> None:
    """Every workload that once made the twin diverge (conformance/regressions/) stays exact."""
    workload = load(path)
    for result in run_instances(workload, pair.twin, pair.reference):  # a pair's two too
        assert result.error is None, f"{result.error}\n{result.error_detail}"
        divergence = result.divergence_at(LEVEL)
        assert divergence is None, f"{divergence.summary()} ({workload.description})"


def test_the_regressions_directory_is_not_empty() -> None:
    assert len(regression_files()) >= 3
