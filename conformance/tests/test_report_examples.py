"""Hypothesis example counts: what each test really ran reaches junit (with and without
pytest-xdist, as CI runs it), and the index shows them per area beside what the area checks.
No upstream vLLM needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.ci.hypothesis_counts import counts_of
from conformance.ci.report import CaseResult, area_of, read_junit, render_html

TINY = '''
from hypothesis import assume, given, settings, strategies as st

@settings(max_examples=7, database=None)
@given(st.integers(0, 10**9))
def test_seven(x):
    pass

CALLS = []

@settings(max_examples=5, database=None)
@given(st.integers(0, 10**9))
def test_five_valid(x):
    CALLS.append(x)
    assume(len(CALLS) > 1)  # the first example is rejected, whatever was drawn

def test_plain():
    pass
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_counts_reach_junit(tmp_path: Path, workers: list[str]) -> None:
    (tmp_path / "test_tiny.py").write_text(TINY)
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers,
                    "-p", "conformance.ci.hypothesis_counts", f"--junitxml={junit}",
                    "test_tiny.py"], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    counted = {r.name: (r.examples, r.invalid is not None and r.invalid > 0)
               for r in read_junit(junit)}
    assert counted == {"test_seven": (7, False), "test_five_valid": (5, True),
                       "test_plain": (None, False)}


def test_counts_skip_shrinking_and_count_failures() -> None:
    phase = {"test-cases": [{"status": "valid"}, {"status": "interesting"},
                            {"status": "invalid"}, {"status": "overrun"}]}
    counts = counts_of({"generate-phase": phase, "shrink-phase": phase, "reuse-phase": phase})
    assert (counts.examples, counts.invalid) == (4, 4)


def test_the_conformance_tests_load_the_plugin(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("conformance.ci.hypothesis_counts")


def test_the_index_shows_examples_and_checks_per_area() -> None:
    kv = "conformance.tests.test_kv_differential.TestKVLockstep_"
    results = [
        CaseResult(f"{kv}full", "runTest", "passed", 3.0, "", 200, 31),
        CaseResult(f"{kv}window", "runTest", "passed", 2.0, "", 1000, 0),
        CaseResult("conformance.tests.test_sched_hypothesis", "test_generated", "passed", 9.0,
                   "", 50),
        CaseResult("conformance.tests.test_sched_suite", "test_suite", "passed", 1.0, ""),
    ]
    assert [area_of(r) for r in results] == ["KV core"] * 2 + ["Scheduler lockstep"] * 2
    page = render_html(results, "now")
    assert "1,250 Hypothesis examples in 3 property tests." in page
    kv_group = page.split("<b>KV core</b>")[1].split("</details>")[0]
    assert "1,200 Hypothesis examples in 2 property tests." in kv_group
    assert "Checks: block pool, hashing and KV-cache manager" in kv_group
    assert "<td class='n'>200 <span class='inv'>(+31 invalid)</span></td>" in kv_group
    sched_group = page.split("<b>Scheduler lockstep</b>")[1].split("</details>")[0]
    assert "50 Hypothesis examples in 1 property test." in sched_group
    assert "<td class='n'></td>" in sched_group  # not a Hypothesis test: no count


def test_release_and_coverage_tests_have_areas_of_their_own() -> None:
    def case(suite: str) -> CaseResult:
        return CaseResult(suite, "t", "passed", 0.1, "")

    assert area_of(case("conformance.tests.test_release_matrix")) == "Releases and drift"
    assert area_of(case("conformance.tests.test_drift_releases")) == "Releases and drift"
    assert area_of(case("conformance.tests.test_coverage")) == "Upstream coverage"


def test_every_test_module_has_an_area_and_skips_are_counted() -> None:
    """The test index once put a third of the tests (the offload suite, the Continuum fork,
    campaigns) under "Other" without a description, and said "30 passed, 0 failed of 70"
    without the 40 skipped."""
    here = Path(__file__).parent
    loose = [p.stem for p in sorted(here.glob("test_*.py"))
             if area_of(CaseResult(f"conformance.tests.{p.stem}", "t", "passed", 0.1, ""))
             == "Other"]
    assert loose == [], f"test modules in no area: {loose}"
    page = render_html([CaseResult("conformance.tests.test_kv_x", "a", "passed", 0.1, ""),
                        CaseResult("conformance.tests.test_kv_x", "b", "skipped", 0.1, "")],
                       "now")
    assert "1 passed, 0 failed, 1 skipped of 2" in page
