"""The nightly runner on two tiny Hypothesis tests (no vLLM): rounds within the time budget,
each capped and seeded, examples counted per test from Hypothesis' statistics, a failure
reported with its falsifying example and replayed from the example database every round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.ci.nightly import MAX_EXAMPLES, _nodeid, family_of, main, run

TINY = '''
from hypothesis import given, strategies as st


@given(st.integers())
def test_integers(x):
    assert isinstance(x, int)


@given(st.lists(st.integers()))
def test_small_sums(xs):
    assert sum(xs) < 1000
'''


def test_rounds_fit_the_budget_and_count_examples_per_test(tmp_path: Path) -> None:
    tests = tmp_path / "test_tiny.py"
    tests.write_text(TINY.split("\n\n\n@given(st.lists")[0] + "\n")
    nightly = run(0.3, [str(tests)], tmp_path / "out", first=5, seed=1, cwd=tmp_path)
    finished = [r for r in nightly.rounds if not r["stopped_at_deadline"]]
    assert finished and nightly.ok and not nightly.failures
    # round sizes: 5, then doubling (or less, to fit the time left)
    assert finished[0]["examples_per_test"] == 5
    assert all(b["examples_per_test"] <= min(2 * a["examples_per_test"], MAX_EXAMPLES)
               for a, b in zip(finished, finished[1:], strict=False))
    family = nightly.families["test_tiny/integers"]
    assert family.rounds == len(finished)
    assert family.examples == sum(r["examples_per_test"] for r in finished)
    assert sum(r["seconds"] for r in nightly.rounds) < 0.3 * 60 + 5
    assert len({r["seed"] for r in nightly.rounds}) == len(nightly.rounds)
    data = json.loads((tmp_path / "out" / "nightly.json").read_text())
    assert data["ok"] and data["families"]["test_tiny/integers"]["examples"] == family.examples
    assert "test_tiny/integers" in (tmp_path / "out" / "index.html").read_text()


def test_a_failure_is_reported_replayed_and_exits_1(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the example database goes to ./.hypothesis
    tests = tmp_path / "test_tiny.py"
    tests.write_text(TINY)
    code = main(["--minutes", "0.3", "--first", "20", "--seed", "2", "--out",
                 str(tmp_path / "out"), str(tests)])
    assert code == 1
    data = json.loads((tmp_path / "out" / "nightly.json").read_text())
    [failure] = data["failures"]
    assert failure["test"].endswith("test_tiny.py::test_small_sums")
    assert "sum(xs) < 1000" in failure["message"] or "1000" in failure["text"]
    assert "xs=" in failure["text"]  # the falsifying example as Hypothesis printed it
    rounds = [r for r in data["rounds"] if not r["stopped_at_deadline"]]
    assert failure["rounds"] == [r["round"] for r in rounds]  # replayed first every round
    assert data["families"]["test_tiny/small_sums"]["failed_rounds"] == len(rounds)
    assert "test_small_sums" in (tmp_path / "out" / "index.html").read_text()


def test_families_are_named_after_the_kv_family_or_the_test() -> None:
    kv = "conformance/tests/test_kv_differential.py::TestKVLockstep_full_bs16::runTest"
    assert family_of(kv) == "kv/full_bs16"
    assert family_of("conformance/tests/test_sched_hypothesis.py::"
                     "test_generated_workloads_match_upstream_exactly") == \
        "sched/generated_workloads_match_upstream_exactly"
    assert _nodeid("conformance.tests.test_kv_differential.TestKVLockstep_full_bs16",
                   "runTest") == kv
