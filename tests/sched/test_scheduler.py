"""The scheduler's core decisions: budget order, long-prefill caps, admission, preemption,
prefix hits, stops and aborts (speculative decoding and async: test_spec_and_async.py)."""

from impl.sched.request import RequestStatus
from tests.sched.helpers import EOS, make_request, make_scheduler, scheduled, step


def test_running_first_then_waiting_within_one_token_budget() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=48)
    scheduler.add_request(make_request("a", range(100, 140)))
    scheduler.add_request(make_request("b", range(200, 240)))
    out, _ = step(scheduler)
    assert scheduled(out) == {"a": 40, "b": 8}
    out, _ = step(scheduler)
    assert scheduled(out) == {"a": 1, "b": 32}
    # Cascade attention is gone upstream: the field is always an empty list, never None.
    assert out.num_common_prefix_blocks == []


def test_long_prefill_threshold_only_caps_when_requests_compete() -> None:
    alone = make_scheduler(long_prefill_token_threshold=16)
    alone.add_request(make_request("a", range(100, 190)))
    assert scheduled(step(alone)[0]) == {"a": 90}
    pair = make_scheduler(long_prefill_token_threshold=16)
    pair.add_request(make_request("a", range(100, 190)))
    pair.add_request(make_request("b", range(200, 205)))
    assert scheduled(step(pair)[0]) == {"a": 16, "b": 5}
    assert scheduled(step(pair)[0]) == {"a": 16, "b": 1}  # running: capped as well


def test_a_threshold_of_one_token_prefills_one_token_per_step() -> None:
    scheduler = make_scheduler(long_prefill_token_threshold=1)
    scheduler.add_request(make_request("a", range(100, 104)))
    scheduler.add_request(make_request("b", range(200, 203)))
    assert scheduled(step(scheduler)[0]) == {"a": 1, "b": 1}
    assert scheduled(step(scheduler)[0]) == {"a": 1, "b": 1}


def test_max_num_seqs_limits_admission() -> None:
    scheduler = make_scheduler(max_num_seqs=2)
    for name in "abc":
        scheduler.add_request(make_request(name, range(10)))
    assert set(scheduled(step(scheduler)[0])) == {"a", "b"}
    assert scheduler.get_request_counts() == (2, 1)


def test_full_prompt_must_fit_before_a_chunked_admission() -> None:
    # 11 usable blocks; "a" holds 3; "b"'s 150-token prompt needs 10 blocks: refused,
    # although its first 31-token chunk would fit.
    scheduler = make_scheduler(num_blocks=12, max_num_batched_tokens=32)
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=50))
    step(scheduler)
    scheduler.add_request(make_request("b", range(300, 450)))
    assert scheduled(step(scheduler)[0]) == {"a": 1}
    assert scheduler.get_request_counts() == (1, 1)


def test_fcfs_preempts_the_most_recently_admitted_request() -> None:
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64)  # 4 usable blocks
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=40))
    scheduler.add_request(make_request("b", range(200, 232), max_tokens=40))
    assert scheduled(step(scheduler)[0]) == {"a": 32, "b": 32}
    out, _ = step(scheduler)  # "a" needs a 3rd block; none is free: "b" is preempted
    assert out.preempted_req_ids == {"b"} and scheduled(out) == {"a": 1}
    assert scheduler.requests["b"].status == RequestStatus.PREEMPTED
    assert scheduler.requests["b"].num_computed_tokens == 0

    assert scheduler.num_preemptions == 1 and scheduler.requests["b"].num_preemptions == 1


def test_preemption_counters_count_every_preemption() -> None:
    """"b" is preempted at step 1 when "a" needs a 3rd block; at step 33 "a" needs a 5th of 4
    usable blocks while "b" is back in: "a" is preempted in turn. The engine-wide counter (the
    runner tests' evidence that a workload preempts) counts both, each request its own."""
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64)
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=40))
    scheduler.add_request(make_request("b", range(200, 232), max_tokens=40))
    preempted = {}
    for index in range(40):
        out, _ = step(scheduler)
        preempted.update({rid: index for rid in out.preempted_req_ids or ()})
    assert preempted == {"b": 1, "a": 33}
    assert scheduler.num_preemptions == 2
    assert [scheduler.requests[r].num_preemptions for r in "ab"] == [1, 1]


def test_priority_preempts_the_least_important_request() -> None:
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64, policy="priority")
    scheduler.add_request(make_request("low", range(100, 132), priority=5, max_tokens=40))
    scheduler.add_request(make_request("high", range(200, 232), priority=0, max_tokens=40))
    step(scheduler)
    out, _ = step(scheduler)
    assert out.preempted_req_ids == {"low"} and scheduled(out) == {"high": 1}


def test_resumed_request_gets_its_full_token_ids_again() -> None:
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64)
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=3))
    scheduler.add_request(make_request("b", range(200, 232), max_tokens=40))
    step(scheduler)
    step(scheduler)  # "b" preempted
    while "a" in scheduler.requests:
        step(scheduler)
    out, _ = step(scheduler)
    cached = out.scheduled_cached_reqs
    assert cached.resumed_req_ids == {"b"}
    # The prompt and the token sampled before the preemption (the step then sampled one more).
    assert cached.all_token_ids["b"] == scheduler.requests["b"].all_token_ids[:33]
    assert cached.all_token_ids["b"][:32] == list(range(200, 232))


def test_prefix_hit_skips_cached_tokens() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", range(100, 150)))
    step(scheduler)
    scheduler.add_request(make_request("b", range(100, 150)))
    out, _ = step(scheduler)
    (new,) = out.scheduled_new_reqs
    assert new.num_computed_tokens == 48 and scheduled(out)["b"] == 2
    assert [scheduler.requests[r].num_cached_tokens for r in "ab"] == [0, 48]


def test_cached_tokens_are_counted_at_the_first_scheduling_only() -> None:
    """The prefix-cache hit a request reports is the one it got when first scheduled: "b"
    starts with no hit, is preempted at step 17 and resumes at step 40 on one block of its own
    that survived eviction, which must not count as cached prompt."""
    scheduler = make_scheduler(num_blocks=7, max_num_batched_tokens=64)
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=40))
    b = make_request("b", range(200, 232), max_tokens=40)
    scheduler.add_request(b)
    assert b.num_cached_tokens == -1  # not scheduled yet
    preempted, resumed = {}, {}
    for index in range(41):
        out, _ = step(scheduler)
        cached = out.scheduled_cached_reqs
        preempted.update({rid: index for rid in out.preempted_req_ids or ()})
        resumed.update({rid: (index, cached.num_computed_tokens[cached.req_ids.index(rid)])
                        for rid in cached.resumed_req_ids})
    assert preempted == {"b": 17} and resumed == {"b": (40, 16)}  # back on a 16-token hit
    assert b.num_cached_tokens == 0


def test_stop_order_eos_then_stop_ids_then_length() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request("eos-last", range(10), max_tokens=1))
    scheduler.add_request(make_request("ignored", range(10), max_tokens=2, ignore_eos=True))
    scheduler.add_request(make_request("stop-id", range(10), stop_token_ids=[EOS],
                                       ignore_eos=True))
    _, results = step(scheduler, token=lambda _: [EOS])
    reasons = {r.request_id: (r.finish_reason, r.stop_reason) for r in results}
    assert reasons == {"eos-last": ("stop", None), "ignored": (None, None),
                       "stop-id": ("stop", EOS)}


def test_max_model_len_caps_the_sequence() -> None:
    scheduler = make_scheduler(max_model_len=12)
    scheduler.add_request(make_request("a", range(10), max_tokens=100))
    step(scheduler)
    _, results = step(scheduler)
    assert results[-1].finish_reason == "length"


def test_abort_frees_blocks_and_is_reported_next_step() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", range(40)))
    step(scheduler)
    free_before = scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    scheduler.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free_before + 3
    out, _ = step(scheduler)
    assert out.finished_req_ids == {"a"} and not scheduler.has_unfinished_requests()


def test_abort_takes_many_ids_and_ignores_unknown_and_finished_ones() -> None:
    """The engine aborts a batch of ids in one call (a client disconnect drops every request
    of a connection); ids it does not know, or already finished, are skipped."""
    scheduler = make_scheduler()
    for start, rid in ((100, "a"), (200, "b"), (300, "c")):
        scheduler.add_request(make_request(rid, range(start, start + 20)))
    step(scheduler)
    scheduler.finish_requests("c", RequestStatus.FINISHED_ABORTED)
    finished = scheduler.finish_requests(["a", "nope", "c", "b"], RequestStatus.FINISHED_ABORTED)
    assert [r.request_id for r in finished] == ["a", "b"]
    assert not scheduler.running and not scheduler.has_unfinished_requests()
    out, _ = step(scheduler)
    assert out.finished_req_ids == {"a", "b", "c"}


def test_new_requests_carry_their_lora_adapter_to_the_runner() -> None:
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", range(10), lora_name="adapter", lora_path="/a"))
    scheduler.add_request(make_request("b", range(20, 30)))
    out = scheduler.schedule()
    assert [(r.req_id, r.lora_name) for r in out.scheduled_new_reqs] == [
        ("a", "adapter"), ("b", None)]
