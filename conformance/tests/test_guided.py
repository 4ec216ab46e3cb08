"""Guided generation: the search keeps what reached something new and varies it, the probe
sees the twin's arcs, the report compares strategies at the same time, and `vtwin guide`
says bad input in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.campaign.task import DIVERGED, PASSED, Comparison
from conformance.guided.features import (
    ACTIVITY,
    TWIN,
    ArcProbe,
    activity_features,
    bucket,
    traced_spec,
)
from conformance.guided.report import summarize
from conformance.guided.search import MUTANT_ORIGIN, Outcome, Search, Settings
from conformance.guided.state import StateProbe
from conformance.sched.activity import Activity
from vtwin.errors import UserError
from workloads.model import Workload

FAMILIES = ("prefix-sharing", "decode-heavy")


class FakeRunner:
    """Features from the workload's prompt lengths, output lengths and arrivals (so nearly
    every mutant is new); a divergence whenever a prompt is `bad_length` long."""

    def __init__(self, bad_length: int | None = None) -> None:
        self.bad_length = bad_length
        self.seen: list[Workload] = []

    def __call__(self, workload: Workload) -> Outcome:
        self.seen.append(workload)
        lengths = {r.prompt_len for r in workload.requests}
        features = frozenset((TWIN, "impl/x.py", n, n + 1) for n in lengths) | frozenset(
            (TWIN, "impl/y.py", r.max_tokens, r.arrival_step) for r in workload.requests)
        if self.bad_length in lengths:
            return Outcome(Comparison("a", "b", DIVERGED, "exact", "exact:block_tables", 3,
                                      "differs"), features)
        return Outcome(Comparison("a", "b", PASSED, "exact"), features)


def ticking() -> Iterator[float]:
    n = 0.0
    while True:
        n += 1.0
        yield n


def test_uniform_runs_fresh_draws_only_and_keeps_what_was_new() -> None:
    runner = FakeRunner()
    search = Search(Settings("uniform", FAMILIES, runs=12), runner).run()
    assert (search.fresh, search.mutants, search.runs) == (12, 0, 12)
    assert not any(w.name.startswith("mutant") for w in runner.seen)
    assert [w.name for w in runner.seen[:4]] == [
        "prefix-sharing-seed0", "decode-heavy-seed0", "prefix-sharing-seed1",
        "decode-heavy-seed1"]
    # every corpus entry added a feature no earlier run had
    seen: frozenset[object] = frozenset()
    for entry in search.corpus:
        features = runner(entry.workload).features
        assert features - seen
        seen |= features
    assert search.arcs(TWIN) == len(frozenset().union(*(runner(w).features
                                                        for w in list(runner.seen))))


def test_guided_draws_the_same_fresh_workloads_then_varies_its_corpus() -> None:
    uniform = FakeRunner()
    Search(Settings("uniform", FAMILIES, runs=6), uniform).run()
    guided = FakeRunner()
    search = Search(Settings("guided", FAMILIES, runs=60, seed_runs=6), guided).run()
    assert [w.name for w in guided.seen[:6]] == [w.name for w in uniform.seen]
    assert search.mutants > 0 and search.fresh >= 6
    mutants = [e for e in search.corpus if e.origin.startswith(MUTANT_ORIGIN)]
    assert mutants, "a mutant that changed a prompt length joins the corpus"
    assert all(e.added > 0 for e in search.corpus)
    assert sum(e.picked for e in search.corpus) >= search.mutants


def test_the_same_settings_make_the_same_search() -> None:
    first, second = FakeRunner(), FakeRunner()
    Search(Settings("guided", FAMILIES, seed=3, runs=30, seed_runs=4), first).run()
    Search(Settings("guided", FAMILIES, seed=3, runs=30, seed_runs=4), second).run()
    assert first.seen == second.seen


def test_a_failure_is_kept_once_per_signature_and_can_stop_the_search() -> None:
    probe = FakeRunner()
    Search(Settings("uniform", FAMILIES, runs=8), probe).run()
    bad = probe.seen[5].requests[0].prompt_len
    search = Search(Settings("uniform", FAMILIES, runs=8), FakeRunner(bad)).run()
    assert list(search.found) == ["exact:block_tables"]
    found = search.found["exact:block_tables"]
    assert found.run <= 6 and bad in {r.prompt_len for r in found.workload.requests}
    stopped = Search(Settings("uniform", FAMILIES, runs=8, stop_on_failure=True),
                     FakeRunner(bad)).run()
    assert stopped.runs == found.run


def test_a_time_budget_ends_the_search() -> None:
    clock = ticking()
    search = Search(Settings("uniform", FAMILIES, seconds=5.0), FakeRunner(),
                    clock=lambda: next(clock)).run()
    # the clock is read before each run and after it: runs at 1 and 3 ticks, none at 5
    assert search.runs == 2
    assert [p.seconds for p in search.timeline] == [2.0, 4.0]


def test_an_earlier_corpus_runs_first() -> None:
    probe = FakeRunner()
    Search(Settings("uniform", ("bursty",), runs=2), probe).run()
    replay = [(w, f"corpus {n}") for n, w in enumerate(probe.seen)]
    runner = FakeRunner()
    search = Search(Settings("guided", FAMILIES, runs=5, seed_runs=4), runner,
                    replay=replay).run()
    assert runner.seen[:2] == probe.seen and search.replayed == 2
    assert search.corpus[0].origin == "corpus 0"


def test_a_search_needs_a_budget() -> None:
    with pytest.raises(ValueError, match="budget"):
        Settings("guided", FAMILIES)


def test_activity_counts_are_bucketed_like_afl_hit_counts() -> None:
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 7, 8)] == [0, 1, 2, 2, 3, 3, 4]
    activity = Activity(preemptions=5, evictions=0, padded_requests=0, prefix_hit_tokens=1,
                        resumed=0, aborted=0)
    assert activity_features(activity) == {(ACTIVITY, "preemptions", 3, 0),
                                           (ACTIVITY, "prefix_hit_tokens", 1, 0)}


def test_the_probe_sees_the_twins_arcs() -> None:
    import coverage

    from impl.core.block_pool import BlockPool

    if coverage.Coverage.current() is not None:
        pytest.skip("these tests run under coverage.py, which the probe cannot nest in")
    if os.environ.get("VTWIN_COMPILED") == "1":
        pytest.skip("VTWIN_COMPILED=1: the compiled twin has no Python lines to trace")
    probe = ArcProbe.here(upstream=False)

    def build() -> BlockPool:
        return BlockPool(8, enable_caching=True, enable_kv_cache_events=False)

    pool, features = probe.run(build)
    assert pool is not None
    files = {f[1] for f in features}
    assert "impl/core/block_pool.py" in files
    assert all(f[0] == TWIN for f in features)
    _, again = probe.run(build)
    assert again <= features


def test_systems_outside_this_process_are_refused_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError, match="worker process"):
        traced_spec("vllm==0.33.0")
    monkeypatch.setenv("VTWIN_COMPILED", "1")
    with pytest.raises(UserError, match="VTWIN_COMPILED"):
        traced_spec("impl")
    monkeypatch.delenv("VTWIN_COMPILED")
    assert traced_spec("impl") == "impl"


def _search_json(directory: Path, strategy: str, timeline: list[list[float]],
                 found: list[dict[str, object]]) -> None:
    directory.mkdir(parents=True)
    last = timeline[-1]
    (directory / "search.json").write_text(json.dumps({
        "strategy": strategy, "left": "impl", "right": "upstream",
        "settings": {"families": list(FAMILIES)}, "runs": int(last[1]), "mutants": 0,
        "invalid": 0, "errors": [], "twin_arcs": int(last[2]), "upstream_arcs": int(last[3]),
        "warm_up_arcs": [10, 20], "corpus": [], "found": found, "timeline": timeline}))


def test_the_report_compares_strategies_after_the_same_time(tmp_path: Path) -> None:
    _search_json(tmp_path / "guided", "guided",
                 [[10, 1, 100, 200, 1, 0], [50, 5, 150, 260, 3, 1], [100, 9, 170, 300, 4, 1]],
                 [{"signature": "exact:x", "seconds": 50, "run": 5, "detail": "d",
                   "file": "failures/x.jsonl", "origin": "o"}])
    _search_json(tmp_path / "uniform", "uniform",
                 [[20, 2, 120, 210, 2, 0], [60, 6, 130, 240, 2, 0]], [])
    summary = summarize(tmp_path)
    assert summary["common_horizon_seconds"] == 60
    guided = summary["strategies"]["guided"]
    assert guided["at_common_horizon"]["twin_arcs"] == 150
    assert summary["strategies"]["uniform"]["at_common_horizon"]["upstream_arcs"] == 240
    assert guided["arcs_per_hour"] == round((170 + 300 - 30) / (100 / 3600))
    assert guided["found"][0]["file"] == "guided/failures/x.jsonl"


@pytest.mark.parametrize(("args", "message"), [
    (["--minutes", "0"], "--minutes must be positive"),
    (["--runs", "3", "--families", "nope"], "--families: unknown family nope"),
    (["--runs", "3", "--families", "@nope,spec-decode"], "--families: unknown family @nope"),
    (["--runs", "3", "--planted", "no-such-bug"], "no planted bug named no-such-bug"),
    ([], "needs a budget"),
])
def test_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "guide", *args,
                           "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_the_state_probe_sees_a_hole_inside_a_cached_run() -> None:
    """A 31-token hit search over 16-token chunks of 4-token blocks scans the local window,
    blocks 4-6. Blocks 4 and 6 cached, 5 missing: the scan stops at 5 with 6 still cached
    behind it (a hole). With 5 cached too, nothing is recorded."""
    from impl.core.block_pool import BlockPool
    from impl.core.chunked_local import ChunkedLocalAttentionManager
    from impl.core.specs import ChunkedLocalAttentionSpec

    if os.environ.get("VTWIN_COMPILED") == "1":
        pytest.skip("VTWIN_COMPILED=1: the compiled twin's classes cannot be wrapped")
    plain_scan = ChunkedLocalAttentionManager.__dict__["find_longest_cache_hit"]
    probe = StateProbe()
    probe.install()
    probe.install()  # once per process: a second call wraps nothing again
    try:
        spec = ChunkedLocalAttentionSpec(block_size=4, attention_chunk_size=16)
        pool = BlockPool(16, enable_caching=True, enable_kv_cache_events=False)
        blocks = pool.get_new_blocks(8)
        hashes = [bytes([n]) * 4 for n in range(8)]
        for index in (4, 6):
            pool.cache_partial_block(blocks[index], hashes[index], 0, 4 * index + 2)
        _, length = ChunkedLocalAttentionManager.find_longest_cache_hit(
            hashes, 31, [0], pool, spec, 4)
        assert length == 20  # null blocks 0-3, then block 4
        name = "ChunkedLocalAttentionManager"
        assert probe.take() == {("state", f"{name}:miss-before-window-end", 0, 0),
                                ("state", f"{name}:hole", 0, 0)}
        pool.cache_partial_block(blocks[5], hashes[5], 0, 22)
        ChunkedLocalAttentionManager.find_longest_cache_hit(hashes, 31, [0], pool, spec, 4)
        assert probe.take() == frozenset()
    finally:
        probe.uninstall()
    assert ChunkedLocalAttentionManager.__dict__["find_longest_cache_hit"] is plain_scan


def test_the_state_probe_sees_a_chunk_scheduled_after_a_budget_change() -> None:
    """Within one plan: a request scheduled after a scheduled one was preempted (its tokens
    taken back), and after an admitted decode was padded to the uniform spec-decode width;
    bucket 1 when the budget left cut the later chunk. Placeholder drafts alone (async
    scheduling) are not padding."""
    from types import SimpleNamespace

    from impl.sched.admission_rules import AdmissionRules
    from impl.sched.output import PLACEHOLDER_DRAFT
    from impl.sched.step_plan import StepPlan

    if os.environ.get("VTWIN_COMPILED") == "1":
        pytest.skip("VTWIN_COMPILED=1: the compiled twin's classes cannot be wrapped")
    plain = StepPlan.schedule
    probe = StateProbe()
    probe.install()
    try:
        victim: Any = SimpleNamespace(request_id="victim", get_num_encoder_embeds=len)
        later: Any = SimpleNamespace(request_id="later", get_num_encoder_embeds=len)
        no_blocks: Any = None
        plan = StepPlan(token_budget=10)
        plan.schedule(victim, 6, no_blocks)
        plan.scheduled_running.append(victim)
        assert probe.take() == frozenset()
        plan.take_back(victim)
        plan.schedule(later, 4, no_blocks)  # 10 left: not cut
        assert probe.take() == {("state", "sched:scheduled-after-taken-back", 0, 0)}
        padded = StepPlan(token_budget=8)
        rules: Any = SimpleNamespace(num_spec_tokens=2, max_model_len=64)
        assert AdmissionRules._uniform_decode_padding(rules, 10, 1) == 2
        padded.schedule(victim, 3, no_blocks)  # the padded decode itself
        padded.spec_tokens["victim"] = [PLACEHOLDER_DRAFT] * 2
        padded.schedule(later, 5, no_blocks)  # exactly what was left: cut by the budget
        assert probe.take() == {("state", "sched:scheduled-after-padding", 1, 0)}
        async_drafts = StepPlan(token_budget=8)  # placeholders without padding: no state
        async_drafts.spec_tokens["victim"] = [PLACEHOLDER_DRAFT] * 2
        async_drafts.schedule(later, 5, no_blocks)
        assert probe.take() == frozenset()
    finally:
        probe.uninstall()
    assert StepPlan.schedule is plain


def test_focus_groups_name_known_families_and_take_turns_by_night() -> None:
    """Every family of a focus group exists (a renamed family breaks this, not a nightly);
    groups expand in place, duplicates once; five nights in a row search every group."""
    from conformance.campaign.families import (
        FOCUS,
        family_names,
        focus_of_the_night,
        parse_families,
    )

    known = set(family_names())
    assert all(set(families) <= known for families in FOCUS.values())
    assert parse_families("spec-decode,@spec-decode") == ("spec-decode", "structured-output",
                                                          "hypothesis")
    nights = {focus_of_the_night(739_000 + night) for night in range(len(FOCUS))}
    assert nights == set(FOCUS)
