"""The continuum policy, step by step, with exact block ids and steps.

Block size 4, 10 usable blocks, TTL 60 ms at 20 ms a step: a pin made while step S's output
is applied expires at S * 20 + 60 ms and is released at the top of the first step at or past
it, S + 3.
"""

from __future__ import annotations

import pytest

from impl.sched.continuum.estimator import ToolCallEstimator
from impl.sched.continuum.policy import ContinuumPolicy, Pin
from impl.sched.continuum.queue import ContinuumRequestQueue
from impl.sched.continuum.settings import ContinuumSettings
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler
from impl.sched.tracing.tracer import PrefixCacheEvent, StepDecision, StepSnapshot, Tracer
from tests.sched.helpers import make_request, make_scheduler, step
from vtwin.errors import IntegrityError

SETTINGS = ContinuumSettings(ttl_ms=60.0, estimator="fixed", threshold_ms=2000.0, step_ms=20.0)
PROMPT = list(range(10, 18))  # two full blocks of 4


def continuum(**settings: object) -> Scheduler:
    values: dict[str, object] = {"ttl_ms": 60.0, "step_ms": 20.0, **settings}
    config = ContinuumSettings(**values)  # type: ignore[arg-type]
    return make_scheduler(num_blocks=11, block_size=4, max_num_seqs=4,
                          max_num_batched_tokens=64, max_model_len=32, policy="continuum",
                          continuum=config)


def turn(rid: str, prompt: list[int], arrival: int, last: bool = False,
         job: str | None = "j") -> Request:
    return make_request(rid, prompt, block_size=4, max_tokens=2, arrival_time=float(arrival),
                        job_id=job, is_last_step=last)


def test_a_finished_turn_is_pinned_until_its_ttl_then_freed() -> None:
    s = continuum()
    s.add_request(turn("a", PROMPT, 0))
    step(s)  # step 0: the 8-token prefill fills blocks 1 and 2
    assert s.kv_cache_manager.get_block_ids("a") == ([1, 2],)
    step(s)  # step 1: decode into block 3, second token: finished, pinned at 20 ms
    assert s.continuum is not None
    assert [p.request.request_id for p in s.continuum.pins] == ["a"]
    assert s.continuum.pins[0].expires_ms == 80.0
    assert "a" in s.requests and s.kv_cache_manager.get_block_ids("a") == ([1, 2, 3],)
    assert s.has_pins() and not s.has_unfinished_requests()
    s.check_integrity()
    step(s)  # step 2 (40 ms)
    step(s)  # step 3 (60 ms): still held
    assert s.kv_cache_manager.get_block_ids("a") == ([1, 2, 3],)
    s.schedule()  # step 4 (80 ms): released before anything is allocated
    assert not s.has_pins() and "a" not in s.requests
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 10
    s.check_integrity()


def test_the_next_turn_hits_the_pin_and_replaces_it() -> None:
    s = continuum()
    s.add_request(turn("a", PROMPT, 0))
    step(s)
    step(s)  # a pinned with blocks 1, 2, 3; its tokens: PROMPT + [7, 7]
    s.add_request(turn("b", PROMPT + [7, 7, 30, 31], 2))
    out, _ = step(s)  # step 2: b hits a's two full blocks, computes 4 new tokens
    assert out.scheduled_new_reqs[0].num_computed_tokens == 8
    assert s.kv_cache_manager.get_block_ids("b") == ([1, 2, 4],)
    step(s)  # step 3: b finishes and is pinned; a's pin (same job) is released first
    assert s.continuum is not None
    assert [p.request.request_id for p in s.continuum.pins] == ["b"]
    assert "a" not in s.requests and s.continuum.pins[0].expires_ms == 120.0
    s.check_integrity()


@pytest.mark.parametrize(("last", "job", "settings"), [
    (True, "j", {}),  # the job's final answer
    (False, None, {}),  # no job: no next turn to keep it for
    (False, "j", {"ttl_ms": 2500.0}),  # predicted call past the 2 s threshold
    (False, "j", {"ttl_ms": 2000.0}),  # at the threshold: pinned only strictly under it
])
def test_the_gates_free_instead_of_pinning(last: bool, job: str | None,
                                           settings: dict[str, float]) -> None:
    s = continuum(**settings)
    s.add_request(turn("a", PROMPT, 0, last=last, job=job))
    step(s)
    step(s)
    assert not s.has_pins() and "a" not in s.requests
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 10


def test_a_turn_aborted_before_the_first_step_is_pinned_from_time_zero() -> None:
    s = continuum()
    s.add_request(turn("a", PROMPT, 0))
    s.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    assert s.continuum is not None
    assert [(p.request.request_id, p.expires_ms) for p in s.continuum.pins] == [("a", 60.0)]


def test_a_ttl_under_a_millisecond_still_pins() -> None:
    """Any positive time-to-live pins: 0.5 ms holds the blocks until the next step starts."""
    s = continuum(ttl_ms=0.5)
    s.add_request(turn("a", PROMPT, 0))
    step(s)
    step(s)  # finished at 20 ms: pinned until 20.5 ms
    assert s.continuum is not None
    assert [(p.request.request_id, p.expires_ms) for p in s.continuum.pins] == [("a", 20.5)]
    s.schedule()  # 40 ms: released
    assert not s.has_pins() and "a" not in s.requests


def test_the_victim_is_the_last_unpinned_from_the_position_on() -> None:
    policy = ContinuumPolicy(SETTINGS, make_scheduler().kv_cache_manager, {})
    pinned = turn("old", PROMPT, 0, job="p")
    policy.pins.append(Pin(pinned, 100.0))
    running = [turn("x", PROMPT, 0, job="p"), turn("y", PROMPT, 0, job=None),
               turn("z", PROMPT, 0, job="p")]
    assert policy.victim_index(running, 0) == 1
    assert policy.victim_index(running, 2) == 2  # only pinned jobs left: LIFO
    assert policy.victim_index(running[:1], 0) == 0


def test_the_waiting_queue_puts_warm_jobs_first() -> None:
    queue = ContinuumRequestQueue()
    for rid, job in (("a", "cold"), ("b", "warm"), ("c", "warm"), ("d", None)):
        queue.add_request(turn(rid, PROMPT, 0, job=job))
    assert queue.peek_request().request_id == "a"
    queue.warm_jobs = frozenset({"warm"})
    assert queue.peek_request().request_id == "b"
    assert [queue.pop_request().request_id for _ in range(4)] == ["b", "c", "a", "d"]


def test_the_learned_estimator_pins_one_step_past_the_longest_gap() -> None:
    estimator = ToolCallEstimator(ContinuumSettings(ttl_ms=500.0, estimator="learned",
                                                    step_ms=20.0))
    first = turn("t0", PROMPT, 0)
    assert estimator.set_up_pin(first) == 500.0  # nothing seen yet: ttl_ms
    estimator.request_finished(first, 100.0)
    estimator.request_arrives(turn("t1", PROMPT, 0), 400.0)  # a 300 ms tool call
    assert estimator.set_up_pin(first) == 320.0
    estimator.request_finished(first, 1000.0)
    estimator.request_arrives(turn("t2", PROMPT, 0), 3500.0)  # a 2.5 s call: no more pins
    assert estimator.set_up_pin(first) == 0.0


def test_integrity_catches_a_pin_past_its_expiry() -> None:
    s = continuum()
    s.add_request(turn("a", PROMPT, 0))
    step(s)
    step(s)
    assert s.continuum is not None
    s.continuum.now_step = 10  # as if the step's sweep had not run
    with pytest.raises(IntegrityError, match="expired at 80.0 ms"):
        s.check_integrity()


def test_the_tracer_records_snapshot_lookup_and_decision() -> None:
    s = continuum()
    tracer = s.tracer = Tracer()
    s.add_request(turn("a", PROMPT, 0))
    step(s)
    step(s)
    s.schedule()  # step 2: a is pinned
    records = tracer.take()
    assert [type(r) for r in records] == [StepSnapshot, PrefixCacheEvent, StepDecision,
                                          StepSnapshot, StepDecision, StepSnapshot,
                                          StepDecision]
    assert records[1] == PrefixCacheEvent(0, "a", "j", 0, 0, 8, 8)
    assert records[2] == StepDecision(0, ("a",), (), (), (), (("a", 8),), 8)
    snap = records[5]
    assert isinstance(snap, StepSnapshot)
    assert (snap.step, snap.free_blocks, snap.num_pinned, snap.pinned_blocks,
            snap.pinned_unique_blocks, snap.pinned_job_ids, snap.gpu_cached_blocks) == (
        2, 7, 1, 3, 3, ("j",), 2)


def test_closed_loop_arrivals_follow_the_finish_and_extend_the_prompt() -> None:
    from conformance.sched.arrivals import Arrivals
    from workloads.model import AfterSpec, EngineConfig, RequestSpec, Workload

    first = RequestSpec("a", 2, (5, 6, 7), 4, job_id="j", is_last_step=False)
    second = RequestSpec("b", 2 + 1 + 2, (9,), 4, job_id="j", after=AfterSpec("a", 45.0))
    orphan = RequestSpec("c", 7, (1,), 4, after=AfterSpec("gone", 0.0))
    arrivals = Arrivals(Workload("w", "", EngineConfig(), (first, second, orphan),
                                 step_ms=20.0))
    assert [r.request_id for r in arrivals.due(2)] == ["a"]
    arrivals.observe(3, [("a", (40, 41), False)], ())
    arrivals.observe(4, [("a", (42,), True)], ())  # finished at step 4: b at 4 + 1 + 2
    assert [r.request_id for r in arrivals.due(6)] == []
    due = list(arrivals.due(7))
    assert [(r.request_id, r.arrival_step, r.prompt_token_ids) for r in due] == [
        ("c", 7, (1,)), ("b", 7, (5, 6, 7, 40, 41, 42, 9))]
    assert arrivals.arrived == {"a": 2, "c": 7, "b": 7} and not arrivals
