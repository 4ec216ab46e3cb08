"""Speculative decoding (drafts, their verification and padding, EAGLE lookahead slots) and
async scheduling (output placeholders, steps in flight during preemptions) in the scheduler."""

import pytest

from impl.sched.output import DraftTokenIds, ModelRunnerOutput
from tests.sched.helpers import make_request, make_scheduler, scheduled, step


def test_rejected_drafts_are_clawed_back() -> None:
    scheduler = make_scheduler(num_spec_tokens=3)
    scheduler.add_request(make_request("a", range(10)))
    step(scheduler)
    scheduler.update_draft_token_ids(DraftTokenIds(["a"], [[50, 51, 52]]))
    out = scheduler.schedule()
    assert out.scheduled_spec_decode_tokens == {"a": [50, 51, 52]} and scheduled(out) == {"a": 4}
    from impl.sched.output import ModelRunnerOutput

    scheduler.update_from_output(out, ModelRunnerOutput(["a"], {"a": 0}, [[50, 9]]))
    request = scheduler.requests["a"]
    # 10 prompt + 1 + (1 accepted + 1 bonus) tokens; 2 of the 3 drafts were rejected.
    assert request.num_tokens == 13 and request.num_computed_tokens == 12


def test_a_step_without_new_drafts_schedules_a_plain_decode() -> None:
    """Drafts are used once: if the drafter proposes nothing for the next step (an n-gram
    drafter without a match), the request decodes one token and nothing is re-verified."""
    scheduler = make_scheduler(num_spec_tokens=2)
    scheduler.add_request(make_request("a", range(10)))
    step(scheduler)
    scheduler.update_draft_token_ids(DraftTokenIds(["a"], [[50, 51]]))
    out, _ = step(scheduler)
    assert out.scheduled_spec_decode_tokens == {"a": [50, 51]}
    out, _ = step(scheduler)  # no update_draft_token_ids in between
    assert out.scheduled_spec_decode_tokens == {} and scheduled(out) == {"a": 1}


def test_the_retry_after_a_preemption_still_reserves_lookahead_slots() -> None:
    """EAGLE-style lookahead: a's next token (position 15) plus 2 lookahead slots needs a 2nd
    block, none is free, b is preempted, and the retry must ask for the lookahead again."""
    scheduler = make_scheduler(num_blocks=4, num_lookahead_tokens=2, num_spec_tokens=2)
    scheduler.add_request(make_request("a", range(100, 114)))
    scheduler.add_request(make_request("b", range(200, 230)))
    out, _ = step(scheduler)
    assert [(r.req_id, r.block_ids) for r in out.scheduled_new_reqs] == [
        ("a", ([1],)), ("b", ([2, 3],))]
    out, _ = step(scheduler)
    assert out.preempted_req_ids == {"b"} and scheduled(out) == {"a": 1}
    assert out.scheduled_cached_reqs.new_block_ids == [([3],)]


@pytest.mark.parametrize("budget", [3, 2])
def test_a_padded_decode_is_admitted_only_when_the_padding_fits_the_budget(budget: int) -> None:
    """b's prompt hits 32 of its 33 tokens, so it needs one token: with 2 speculative tokens it
    is padded to 1 + 2 placeholder drafts. A budget of exactly 3 admits it padded; a budget of
    2 admits nothing rather than an unpadded decode."""
    scheduler = make_scheduler(max_num_batched_tokens=budget, num_spec_tokens=2)
    scheduler.add_request(make_request("a", range(100, 133), max_tokens=1))
    while scheduler.requests:
        step(scheduler)
    scheduler.add_request(make_request("b", range(100, 133), max_tokens=5))
    out = scheduler.schedule()
    if budget == 3:
        assert [(r.req_id, r.num_computed_tokens) for r in out.scheduled_new_reqs] == [("b", 32)]
        assert scheduled(out) == {"b": 3} and out.scheduled_spec_decode_tokens == {"b": [-1, -1]}
    else:
        assert scheduled(out) == {} and out.scheduled_spec_decode_tokens == {}


def test_drafts_for_a_request_still_in_prefill_are_dropped() -> None:
    scheduler = make_scheduler(num_spec_tokens=2, max_num_batched_tokens=16)
    scheduler.add_request(make_request("a", range(40)))
    step(scheduler)
    scheduler.update_draft_token_ids(DraftTokenIds(["a"], [[50, 51]]))
    assert scheduler.requests["a"].spec_token_ids == []


def test_async_scheduler_uses_output_placeholders() -> None:
    scheduler = make_scheduler(asynchronous=True)
    scheduler.add_request(make_request("a", range(10), max_tokens=3))
    first = scheduler.schedule()
    second = scheduler.schedule()  # before the first step's token is known
    assert scheduled(first) == {"a": 10} and scheduled(second) == {"a": 1}
    assert scheduler.requests["a"].num_output_placeholders == 2



def test_a_request_preempted_while_its_step_is_in_flight_can_still_finish() -> None:
    """Async: step 2 is scheduled before step 1's tokens are known and preempts "b" to give "a"
    a 3rd block; step 1's token then ends "b" (max_tokens 1). It must leave the waiting queue
    with its blocks already gone, and be reported finished."""
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64, asynchronous=True)
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=3))
    scheduler.add_request(make_request("b", range(200, 232), max_tokens=1))
    first = scheduler.schedule()
    second = scheduler.schedule()
    assert scheduled(first) == {"a": 32, "b": 32}
    assert scheduled(second) == {"a": 1} and second.preempted_req_ids == {"b"}
    # A preempted request owns no KV any more, so none of it is in flight either.
    assert scheduler.requests["b"].num_inflight_tokens == 0
    assert scheduler.requests["a"].num_inflight_tokens == 33
    outputs = scheduler.update_from_output(
        first, ModelRunnerOutput(["a", "b"], {"a": 0, "b": 1}, [[7], [8]]))
    assert [(o.request_id, o.new_token_ids, o.finish_reason) for o in outputs] == [
        ("a", [7], None), ("b", [8], "length")]
    assert scheduler.get_request_counts() == (1, 0) and list(scheduler.requests) == ["a"]
    scheduler.kv_cache_manager.check_integrity()
    assert scheduler.schedule().finished_req_ids == {"b"}


def test_rejected_drafts_of_a_request_preempted_in_flight_are_not_clawed_back() -> None:
    """Async spec decode: "b" is preempted while its step (1 token + 2 placeholder drafts) is in
    flight; that step's output rejects both drafts. "b" restarts from 0 computed tokens, so
    there is nothing to claw back: it must stay at 0, not go to -2."""
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64, asynchronous=True,
                               num_spec_tokens=2)
    scheduler.add_request(make_request("a", range(100, 117), max_tokens=20))
    scheduler.add_request(make_request("b", range(200, 223), max_tokens=20))
    previous = scheduler.schedule()
    for _ in range(5):
        current = scheduler.schedule()
        assert not current.preempted_req_ids
        ids = list(previous.num_scheduled_tokens)
        scheduler.update_from_output(previous, ModelRunnerOutput(
            ids, {r: i for i, r in enumerate(ids)}, [[7] for _ in ids]))
        previous = current
    current = scheduler.schedule()
    assert current.preempted_req_ids == {"b"}
    assert previous.scheduled_spec_decode_tokens["b"] == [-1, -1]
    b = scheduler.requests["b"]
    scheduler.update_from_output(previous, ModelRunnerOutput(["a", "b"], {"a": 0, "b": 1},
                                                              [[7], [7]]))
    assert (b.num_computed_tokens, b.num_output_placeholders) == (0, 0)


def test_priority_victim_before_the_loop_position_shifts_it_back() -> None:
    """Async + priority, 4 usable blocks of 16. "low" runs first in the list but is skipped
    (its in-flight step already reaches max_tokens); "mid" needs a block, so "low" is
    preempted from *before* the loop position. "last", after "mid", must still be visited.
    (Found by the random lockstep: regressions/priority-victim-skipped-before-index.jsonl.)"""
    scheduler = make_scheduler(num_blocks=5, asynchronous=True, policy="priority")
    scheduler.add_request(make_request("low", range(100, 115), max_tokens=2, priority=2))
    first = scheduler.schedule()
    scheduler.update_from_output(first, ModelRunnerOutput(["low"], {"low": 0}, [[7]]))
    for rid, prompt, priority in (("mid", range(200, 216), 0), ("last", range(300, 308), 1),
                                  ("filler", range(400, 415), 0)):
        scheduler.add_request(make_request(rid, prompt, max_tokens=8, priority=priority))
    second = scheduler.schedule()
    assert scheduled(second) == {"low": 1, "filler": 15, "mid": 16, "last": 8}
    third = scheduler.schedule()  # before the second step's output is back
    assert scheduled(third) == {"filler": 1, "mid": 1, "last": 1}
    assert third.preempted_req_ids == {"low"}
    scheduler.check_integrity()


@pytest.mark.parametrize("level", ["summary", "detailed"])
def test_per_request_metrics_reach_the_finished_output(level: str) -> None:
    """per_request_spec_decode_metrics: each verify step counts its accepted drafts in a
    histogram and its drafts proposed; `detailed` keeps each step's counts in order; the
    metrics ride only on the output that finishes the request."""
    scheduler = make_scheduler(num_spec_tokens=3, per_request_spec_decode_metrics=level)
    scheduler.add_request(make_request("a", range(10), max_tokens=6))
    step(scheduler)
    outputs = []
    for drafts, sampled in (([50, 51, 52], [50, 9]), ([60, 61], [60, 61, 62])):
        scheduler.update_draft_token_ids(DraftTokenIds(["a"], [drafts]))
        out = scheduler.schedule()
        outputs += scheduler.update_from_output(out, ModelRunnerOutput(["a"], {"a": 0},
                                                                      [sampled]))
    assert [o.finish_reason for o in outputs] == [None, "length"]
    assert outputs[0].spec_metrics is None
    metrics = outputs[1].spec_metrics
    assert metrics is not None
    assert (metrics.histogram, metrics.num_draft_tokens) == ([0, 1, 1, 0], 5)
    expected = ([1, 2], [3, 2]) if level == "detailed" else ([], [])
    assert (metrics.per_step_accepted, metrics.per_step_drafted) == expected


def test_no_per_request_metrics_by_default() -> None:
    scheduler = make_scheduler(num_spec_tokens=2)
    scheduler.add_request(make_request("a", range(10), max_tokens=1))
    _, outputs = step(scheduler)
    assert [(o.finish_reason, o.spec_metrics) for o in outputs] == [("length", None)]
