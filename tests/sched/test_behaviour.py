"""The release switches (`impl.behaviour`): each difference between vLLM 0.32.0 and 0.33.0, with
the exact state each release leaves behind. The differential suite proves the same against both
releases; these pin it without an oracle."""

from __future__ import annotations

import pytest

from impl.behaviour import (
    BEHAVIOUR_0_32,
    BEHAVIOUR_0_33,
    FOLLOWED_RELEASES,
    Behaviour,
    behaviour_for,
)
from impl.connector.types import NixlSettings, OffloadingSettings, OffloadSettings
from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.output import DraftTokenIds, ModelRunnerOutput
from impl.sched.request import Request
from impl.sched.scheduler import Scheduler
from impl.sched.step_plan import StepPlan
from tests.sched.helpers import NONE_HASH, make_request, make_scheduler, scheduled, step
from vtwin.errors import ReleaseCheckFailed

RELEASES = [BEHAVIOUR_0_32, BEHAVIOUR_0_33]


def num_cached_blocks(scheduler: Scheduler, request_id: str) -> int:
    manager = scheduler.kv_cache_manager.coordinator.managers[0]
    return manager.num_cached_block.get(request_id, 0)


def verify(scheduler: Scheduler, sampled: list[int]) -> None:
    """One step that verifies the drafts proposed for "a" and samples `sampled`."""
    out = scheduler.schedule()
    scheduler.update_from_output(out, ModelRunnerOutput(["a"], {"a": 0}, [sampled]))


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_blocks_filled_by_verified_drafts_are_cached_when_the_output_is_applied(
        behaviour: Behaviour) -> None:
    """a: 13 prompt tokens, 1 sampled; the next step verifies 3 drafts, all accepted, plus a
    bonus token: 18 tokens, 17 computed, so block 0 (tokens 0-15) is full. 0.33 caches it as
    the output is applied; 0.32 only at a's next allocation."""
    scheduler = make_scheduler(num_spec_tokens=3, enable_kv_cache_events=True,
                               behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 113)))
    step(scheduler)
    scheduler.update_draft_token_ids(DraftTokenIds(["a"], [[50, 51, 52]]))
    verify(scheduler, [50, 51, 52, 9])
    assert scheduler.requests["a"].num_computed_tokens == 17
    assert num_cached_blocks(scheduler, "a") == (1 if behaviour.release == "0.33.0" else 0)
    events = scheduler.take_events()
    assert [type(e).__name__ for e in events] == (
        ["BlockStored"] if behaviour.release == "0.33.0" else [])


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_tokens_a_stop_trims_are_not_cached(behaviour: Behaviour) -> None:
    """Same step, but a stops at max_tokens=3 after 2 of the 4 verified tokens: 16 tokens. The
    trimmed tokens leave the computed count (17 -> 15) before caching, so block 0 is not cached
    by either release and a finishes holding no cached block."""
    scheduler = make_scheduler(num_spec_tokens=3, enable_kv_cache_events=True,
                               behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 113), max_tokens=3))
    step(scheduler)
    scheduler.update_draft_token_ids(DraftTokenIds(["a"], [[50, 51, 52]]))
    verify(scheduler, [50, 51, 52, 9])
    assert "a" not in scheduler.requests
    assert scheduler.take_events() == []
    assert scheduler.kv_cache_manager.block_pool.get_num_cached_blocks() == 0


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_a_priority_request_that_preempts_itself(behaviour: Behaviour) -> None:
    """3 usable blocks. a (priority 5, 15 tokens) runs first; b (priority 0, 31 tokens) joins
    and fills the pool. a's next token needs a 4th block and a is the least important, so it
    preempts itself. 0.32 ends the running phase there (nothing scheduled); 0.33 goes on to
    b, whose next token fits its own last block."""
    scheduler = make_scheduler(num_blocks=4, policy="priority", behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 115), priority=5, arrival_time=0.0))
    step(scheduler)
    scheduler.add_request(make_request("b", range(200, 231), priority=0, arrival_time=1.0))
    out, _ = step(scheduler)
    assert scheduled(out) == {"a": 1, "b": 31}
    out, _ = step(scheduler)
    assert out.preempted_req_ids == {"a"}
    assert scheduled(out) == ({"b": 1} if behaviour.release == "0.33.0" else {})
    assert [r.request_id for r in scheduler.running] == ["b"]


def mamba_config(mode: str, num_blocks: int = 16) -> KVCacheConfig:
    return KVCacheConfig(num_blocks, (
        KVCacheGroupSpec(("attn",), FullAttentionSpec(block_size=16)),
        KVCacheGroupSpec(("ssm",), MambaSpec(block_size=16, mamba_cache_mode=mode))))


def build(behaviour: Behaviour, kv_config: KVCacheConfig, caching: bool = True,
          **settings: int) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                             enable_prefix_caching=caching, behaviour=behaviour,
                             **settings)  # type: ignore[arg-type]
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=False)


def test_mamba_prefix_caching_is_refused_from_0_33_as_upstream_does() -> None:
    build(BEHAVIOUR_0_32, mamba_config("none"))
    build(BEHAVIOUR_0_33, mamba_config("none"), caching=False)
    with pytest.raises(ValueError, match=r"^kv_cache_groups\[1\]\.mamba_cache_mode: vLLM "
                                         r"0\.33\.0 caches mamba prefixes only in 'align'"):
        build(BEHAVIOUR_0_33, mamba_config("none"))


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_mamba_align_refuses_what_the_twin_does_not_implement(behaviour: Behaviour) -> None:
    build(behaviour, mamba_config("align"))
    build(behaviour, mamba_config("align"), caching=False)
    build(behaviour, mamba_config("align"), num_spec_tokens=2)  # drafts' state blocks
    # Finer hashes give sub-block hits (`impl.core.partial_hits`), beside no connector, the
    # CPU tier, the OffloadingConnector (its partial tails) or the NIXL connector.
    build(behaviour, mamba_config("align"), hash_block_size=8)
    for connector in (OffloadingSettings(32, 1), OffloadSettings(num_cpu_blocks=8),
                      NixlSettings()):
        build(behaviour, mamba_config("align"), hash_block_size=8,
              kv_connector=connector)  # type: ignore[arg-type]


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_mamba_align_prompt_boundary_reached_again(behaviour: Behaviour) -> None:
    """24 blocks, budget 64. a (40 tokens) prefills 32 at step 0 (the split stops at 32, the
    last boundary before its final token) and caches its state there (mamba block 3). At step
    1 its last 8 tokens' cache call lands on boundary 32 again: 0.32 marks block 3 cached this
    step, so b (the same prompt) cannot hit it before step 2; 0.33 admits b at step 1 with a
    32-token hit sharing blocks 1, 2 (full) and 3 (mamba)."""
    scheduler = build(behaviour, mamba_config("align", num_blocks=24))
    scheduler.add_request(make_request("a", range(100, 140), max_tokens=4, ignore_eos=True))
    out, _ = step(scheduler)
    assert scheduled(out) == {"a": 32}
    assert scheduler.kv_cache_manager.get_block_ids("a") == ([1, 2], [0, 3])
    scheduler.add_request(make_request("b", range(100, 140), max_tokens=4, ignore_eos=True))
    out, _ = step(scheduler)
    assert scheduler.kv_cache_manager.get_block_ids("a") == ([1, 2, 4], [0, 3, 5])
    if behaviour.mamba_align_skips_keyed_boundary:
        assert scheduled(out) == {"a": 8, "b": 8}
        assert scheduler.kv_cache_manager.get_block_ids("b") == ([1, 2, 6], [0, 3, 7])
        assert scheduler.requests["b"].num_cached_tokens == 32
    else:
        assert scheduled(out) == {"a": 8}
        out, _ = step(scheduler)
        assert scheduled(out) == {"a": 1, "b": 8}
        # a's step-0 state (block 3) is released once its last chunk is processed; b holds it
        assert scheduler.kv_cache_manager.get_block_ids("a") == ([1, 2, 4], [0, 0, 5])
        assert scheduler.kv_cache_manager.get_block_ids("b") == ([1, 2, 6], [0, 3, 7])


def test_presets_by_release() -> None:
    assert FOLLOWED_RELEASES == ("0.32.0", "0.33.0")
    assert [behaviour_for(r) for r in FOLLOWED_RELEASES] == RELEASES
    assert SchedulerConfig(1, 1, 1).behaviour is BEHAVIOUR_0_32
    assert BEHAVIOUR_0_33.switches == {"cache_verified_blocks_on_output": True,
                                       "priority_self_preemption_continues": True,
                                       "mamba_prefix_caching_requires_align": True,
                                       "mamba_align_skips_keyed_boundary": True,
                                       "local_prefill_interval": True,
                                       "lora_limit_counts_running": True,
                                       "offload_lookup_chunk_aligned": True,
                                       "unchunked_item_start_counts_as_before": True,
                                       "encoder_blocked_admission_skips": True,
                                       "offload_lru_request_ranks": True,
                                       "offload_failed_store_event": True,
                                       "offloading_lookup_restarts_stores": True,
                                       "encoder_budget_cut_without_lookahead": True,
                                       "offloading_reset_fence": True,
                                       "eagle_lookahead_block_hashes": True,
                                       "eagle_junction_block_below": True,
                                       "offloading_skips_chunks_with_holes": True,
                                       "offloading_notes_every_allocation": True,
                                       "offloading_sync_loads": True}
    assert not any(BEHAVIOUR_0_32.switches.values())
    with pytest.raises(ValueError, match=r"follows vLLM 0\.32\.0, 0\.33\.0, not '0\.19\.1'"):
        behaviour_for("0.19.1")


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_prefill_schedule_interval_holds_prefill_between_prefill_steps(
        behaviour: Behaviour) -> None:
    """Interval 3, budget 32. a prefills at step 0 (executed step 1), then decodes. b (40
    tokens) arrives at step 2: 0.33 holds it until executed step 4 (3 steps after a's prefill),
    then holds its second chunk until executed step 7, decoding a alone in between; 0.32 never
    holds in a single engine."""
    scheduler = make_scheduler(max_num_batched_tokens=32, prefill_schedule_interval=3,
                               behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 120), max_tokens=24, ignore_eos=True))
    schedules = []
    for index in range(8):
        if index == 2:
            scheduler.add_request(make_request("b", range(200, 240), max_tokens=8,
                                               ignore_eos=True))
        out, _ = step(scheduler)
        schedules.append(scheduled(out))
    if behaviour.release == "0.33.0":
        assert schedules == [{"a": 20}, {"a": 1}, {"a": 1}, {"a": 1, "b": 31}, {"a": 1},
                             {"a": 1}, {"a": 1, "b": 9}, {"a": 1, "b": 1}]
    else:
        assert schedules == [{"a": 20}, {"a": 1}, {"a": 1, "b": 31}, {"a": 1, "b": 9},
                             {"a": 1, "b": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1},
                             {"a": 1, "b": 1}]


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_a_data_parallel_engine_core_throttles_prefill_in_both_releases(
        behaviour: Behaviour) -> None:
    """The engine core of a data-parallel rank passes `throttle_prefills` off its cadence:
    b's prefill waits for the next step the core leaves free, and so does its second chunk;
    a's decode runs every step. The same in both releases (interval 1 in the engine)."""
    scheduler = make_scheduler(max_num_batched_tokens=32, behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 120), max_tokens=24, ignore_eos=True))
    scheduler.add_request(make_request("b", range(200, 240), max_tokens=8, ignore_eos=True))
    schedules = []
    for index in range(6):
        out = scheduler.schedule(throttle_prefills=index % 3 != 0)
        runner = ModelRunnerOutput(list(out.num_scheduled_tokens),
                                   {r: i for i, r in enumerate(out.num_scheduled_tokens)},
                                   [[7] if scheduler.requests[r].num_computed_tokens
                                    >= scheduler.requests[r].num_tokens else []
                                    for r in out.num_scheduled_tokens])
        scheduler.update_from_output(out, runner)
        schedules.append(scheduled(out))
    assert schedules == [{"a": 20, "b": 12}, {"a": 1}, {"a": 1}, {"a": 1, "b": 28},
                         {"a": 1, "b": 1}, {"a": 1, "b": 1}]


def test_a_throttled_step_with_no_decode_running_still_prefills() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=32)
    scheduler.add_request(make_request("a", range(100, 140), max_tokens=4))
    assert scheduled(scheduler.schedule(throttle_prefills=True)) == {"a": 32}
    assert scheduled(scheduler.schedule(throttle_prefills=True)) == {"a": 8}  # a prefill chunk


def test_a_throttled_step_of_a_capacity_bound_engine_still_prefills() -> None:
    """The DP engine core's throttle keeps the local cadence's escapes: a capacity-bound engine
    (its last free step left requests waiting) and one with nothing decoding are not held."""
    from impl.sched.prefill_cadence import PrefillCadence

    cadence = PrefillCadence(1)
    decoding = [make_request("d", range(10))]  # not a prefill chunk: it decodes
    assert cadence.holds_prefill(decoding, throttled=True)
    assert not cadence.holds_prefill(decoding, throttled=False)
    assert not cadence.holds_prefill([], throttled=True)
    cadence.admission_done(num_still_waiting=2)
    assert not cadence.holds_prefill(decoding, throttled=True)


def test_a_capacity_bound_engine_stops_holding_prefill() -> None:
    """Two seats: c waits behind a and b in a step free to admit, so the engine is
    capacity-bound and prefill is not held: c is admitted at step 2, the step after b finishes,
    although only 2 executed steps have passed since the last prefill (interval 3)."""
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=32,
                               prefill_schedule_interval=3, behaviour=BEHAVIOUR_0_33)
    scheduler.add_request(make_request("a", range(100, 120), max_tokens=8, ignore_eos=True))
    scheduler.add_request(make_request("b", range(200, 210), max_tokens=2, ignore_eos=True))
    scheduler.add_request(make_request("c", range(300, 310), max_tokens=2, ignore_eos=True))
    schedules = [scheduled(step(scheduler)[0]) for _ in range(3)]
    assert schedules == [{"a": 20, "b": 10}, {"a": 1, "b": 1}, {"a": 1, "c": 10}]
    assert scheduler.cadence.capacity_bound is False  # the queue drained at c's admission


def test_a_session_parked_in_the_kv_holding_queue_counts_as_waiting_for_the_capacity_bound(
        ) -> None:
    """Two seats: a decodes, session s ended its turn and waits for input (in
    `kv_holding_waiting`, skipped, keeping its seat), c arrives and finds no seat. The release
    step (executed step 4) leaves c waiting: the engine is capacity-bound. s is among the
    skipped and among the waiting (both queues count), so it does not cancel c out. Seen on
    `conformance/regressions/session-capacity-bound-0.33-*.jsonl`."""
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=32,
                               prefill_schedule_interval=3, behaviour=BEHAVIOUR_0_33)
    scheduler.add_request(make_request("a", range(100, 120), max_tokens=8, ignore_eos=True))
    scheduler.add_request(make_request("s", range(200, 210), max_tokens=1, resumable=True))
    assert scheduled(step(scheduler)[0]) == {"a": 20, "s": 10}
    scheduler.add_request(make_request("c", range(300, 310), max_tokens=2, ignore_eos=True))
    schedules = [scheduled(step(scheduler)[0]) for _ in range(3)]
    assert schedules == [{"a": 1}, {"a": 1}, {"a": 1}]
    assert [r.request_id for r in scheduler.kv_holding_waiting] == ["s"]
    assert scheduler.deferred_waiting == {"s"}
    assert scheduler.cadence.capacity_bound is True  # c still waits after the release step


def test_max_loras_skips_a_request_whose_adapter_would_exceed_it() -> None:
    """max_loras 1: a (adapter-a) is admitted; b (adapter-b) would be a second adapter, so it is
    skipped and the scan goes on: c (adapter-a again) and d (no adapter) are admitted behind
    it. b returns to the front of the queue and is reported as skipped, not waiting."""
    scheduler = make_scheduler(max_loras=1)
    for request_id, lora in (("a", "adapter-a"), ("b", "adapter-b"), ("c", "adapter-a"),
                             ("d", None)):
        scheduler.add_request(make_request(request_id, range(100, 110), lora_name=lora))
    scheduler.add_request(make_request("e", range(300, 310)))
    out = scheduler.schedule()
    assert [r.req_id for r in out.scheduled_new_reqs] == ["a", "c", "d", "e"]
    assert [r.request_id for r in scheduler.waiting] == ["b"]
    stats = scheduler.make_stats()
    assert (stats.num_waiting_reqs, stats.num_skipped_waiting_reqs) == (0, 1)


def test_skipped_requests_keep_their_order_at_the_front() -> None:
    scheduler = make_scheduler(max_loras=1, max_num_seqs=2)
    for request_id, lora in (("a", "adapter-a"), ("b", "adapter-b"), ("c", "adapter-c"),
                             ("d", "adapter-a"), ("e", "adapter-b")):
        scheduler.add_request(make_request(request_id, range(100, 110), lora_name=lora))
    out = scheduler.schedule()
    assert [r.req_id for r in out.scheduled_new_reqs] == ["a", "d"]
    assert [r.request_id for r in scheduler.waiting] == ["b", "c", "e"]
    assert scheduler.deferred_waiting == {"b", "c"}  # e was never looked at: the seats ran out


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_the_adapters_counted_against_max_loras(behaviour: Behaviour) -> None:
    """Async scheduling, max_loras 1. a (adapter-a, max_tokens 2) has its last token in flight
    once its first is known, so the third step does not schedule it. 0.32 counts only scheduled
    running requests and admits b (adapter-b) beside a; 0.33 counts every running request and
    keeps b waiting until a finishes."""
    scheduler = make_scheduler(asynchronous=True, max_loras=1, behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 110), max_tokens=2, ignore_eos=True,
                                       lora_name="adapter-a"))
    scheduler.add_request(make_request("b", range(200, 210), max_tokens=2, ignore_eos=True,
                                       lora_name="adapter-b"))
    first, second = scheduler.schedule(), scheduler.schedule()
    scheduler.update_from_output(first, ModelRunnerOutput(["a"], {"a": 0}, [[7]]))
    third = scheduler.schedule()
    assert (scheduled(first), scheduled(second)) == ({"a": 10}, {"a": 1})
    assert scheduled(third) == ({} if behaviour.release == "0.33.0" else {"b": 10})
    assert scheduler.make_stats().num_skipped_waiting_reqs == (
        1 if behaviour.release == "0.33.0" else 0)


def test_a_held_prefill_chunk_is_skipped_not_the_requests_after_it() -> None:
    """Interval 3, chunks of at most 8. a and c decode; b (40 tokens) sits between them in the
    running list, mid-prompt: the held steps schedule a and c, once each, and b's next chunk
    waits for executed step 4, the next that carries prefill."""
    scheduler = make_scheduler(max_num_batched_tokens=24, long_prefill_token_threshold=8,
                               prefill_schedule_interval=3, behaviour=BEHAVIOUR_0_33)
    scheduler.add_request(make_request("a", range(100, 104), max_tokens=30, ignore_eos=True))
    scheduler.add_request(make_request("b", range(200, 240), max_tokens=4, ignore_eos=True))
    scheduler.add_request(make_request("c", range(300, 304), max_tokens=30, ignore_eos=True))
    steps = []
    for _ in range(5):
        out, _ = step(scheduler)
        steps.append((scheduled(out), out.scheduled_cached_reqs.req_ids,
                      scheduler.cadence.last_prefill_step))
    assert steps == [
        ({"a": 4, "b": 8, "c": 4}, [], 1),
        ({"a": 1, "c": 1}, ["a", "c"], 1),
        ({"a": 1, "c": 1}, ["a", "c"], 1),
        ({"a": 1, "b": 8, "c": 1}, ["a", "b", "c"], 4),
        ({"a": 1, "c": 1}, ["a", "c"], 4),
    ]


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_async_caches_the_block_the_last_output_completed(behaviour: Behaviour) -> None:
    """Async, no drafts. a: 15 prompt tokens, max_tokens 2. Its second token is sampled by a
    step whose allocation knew only 15 tokens, and a finishes when that output is applied: the
    block the first sampled token completed (16 tokens) is cached only by caching at output
    time, which both releases do (0.32 up to computed minus placeholders, 0.33 minus in-flight
    tokens), so a finishes leaving one cached block."""
    scheduler = make_scheduler(asynchronous=True, behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 115), max_tokens=2, ignore_eos=True))
    first, second = scheduler.schedule(), scheduler.schedule()
    scheduler.update_from_output(first, ModelRunnerOutput(["a"], {"a": 0}, [[7]]))
    assert scheduled(scheduler.schedule()) == {}  # a's last token is in flight
    assert scheduler.kv_cache_manager.block_pool.get_num_cached_blocks() == 0
    scheduler.update_from_output(second, ModelRunnerOutput(["a"], {"a": 0}, [[8]]))
    assert "a" not in scheduler.requests
    assert scheduler.kv_cache_manager.block_pool.get_num_cached_blocks() == 1


def schedules_with_arrivals(scheduler: Scheduler, arrivals: dict[int, list[Request]],
                            num_steps: int) -> list[dict[str, int]]:
    out = []
    for index in range(num_steps):
        for request in arrivals.get(index, []):
            scheduler.add_request(request)
        out.append(scheduled(step(scheduler)[0]))
        scheduler.check_integrity()
    return out


def test_interval_2_holds_one_step() -> None:
    """a prefills at executed step 1; b, arriving at the next step, waits one step."""
    scheduler = make_scheduler(prefill_schedule_interval=2, behaviour=BEHAVIOUR_0_33)
    arrivals = {0: [make_request("a", range(100, 108), max_tokens=9, ignore_eos=True)],
                1: [make_request("b", range(200, 208), max_tokens=9, ignore_eos=True)]}
    assert schedules_with_arrivals(scheduler, arrivals, 3) == [
        {"a": 8}, {"a": 1}, {"a": 1, "b": 8}]


@pytest.mark.parametrize(("first", "held"), [((5,), False), (tuple(range(100, 108)), True)])
def test_a_one_token_prompt_carries_no_prefill(first: tuple[int, ...], held: bool) -> None:
    """Interval 3. A 1-token prompt's admission computes just the token it samples from: it
    does not restart the interval, so b, arriving while a decodes, is not held (nor is it
    on the engine's first steps). An 8-token prompt does restart it."""
    scheduler = make_scheduler(prefill_schedule_interval=3, behaviour=BEHAVIOUR_0_33)
    arrivals = {0: [make_request("a", first, max_tokens=9, ignore_eos=True)],
                1: [make_request("b", range(200, 208), max_tokens=9, ignore_eos=True)]}
    a = len(first)
    assert schedules_with_arrivals(scheduler, arrivals, 2) == [
        {"a": a}, {"a": 1} if held else {"a": 1, "b": 8}]


def test_a_step_admitting_prefill_then_a_one_token_prompt_carried_prefill() -> None:
    """b (8 tokens) then a (1 token) are admitted in one step: the step carried prefill, so c
    arriving next is held until executed step 4."""
    scheduler = make_scheduler(prefill_schedule_interval=3, behaviour=BEHAVIOUR_0_33)
    arrivals = {0: [make_request("b", range(200, 208), max_tokens=9, ignore_eos=True),
                    make_request("a", (5,), max_tokens=9, ignore_eos=True)],
                1: [make_request("c", range(300, 308), max_tokens=9, ignore_eos=True)]}
    assert schedules_with_arrivals(scheduler, arrivals, 4) == [
        {"b": 8, "a": 1}, {"b": 1, "a": 1}, {"b": 1, "a": 1}, {"b": 1, "a": 1, "c": 8}]


def test_a_held_step_still_admits_a_request_with_one_token_left() -> None:
    """x (33 tokens, max_tokens 1) leaves its first 32 tokens cached. In the held step after
    it, y (the same 33 tokens) has one token left and is admitted as a decode, while z (those
    33 plus one) has two left and waits: the queue stops at it."""
    scheduler = make_scheduler(prefill_schedule_interval=3, behaviour=BEHAVIOUR_0_33)
    prompt = tuple(range(100, 133))
    arrivals = {0: [make_request("d", range(400, 404), max_tokens=20, ignore_eos=True),
                    make_request("x", prompt, max_tokens=1, ignore_eos=True)],
                1: [make_request("y", prompt, max_tokens=4, ignore_eos=True),
                    make_request("z", prompt + (7,), max_tokens=4, ignore_eos=True)]}
    assert schedules_with_arrivals(scheduler, arrivals, 2) == [
        {"d": 4, "x": 33}, {"d": 1, "y": 1}]
    assert [r.request_id for r in scheduler.waiting] == ["z"]


def test_a_held_step_keeps_the_requests_max_loras_skipped() -> None:
    """max_loras 1, interval 3. In a held step, s (adapter-b) is skipped for the adapter limit
    and p (a prompt) stops admission: s goes back to the front, ahead of p, and nothing is
    lost."""
    scheduler = make_scheduler(max_loras=1, prefill_schedule_interval=3,
                               behaviour=BEHAVIOUR_0_33)
    arrivals = {0: [make_request("d", range(400, 404), max_tokens=20, ignore_eos=True,
                                 lora_name="adapter-a")],
                1: [make_request("s", range(500, 504), max_tokens=4, lora_name="adapter-b"),
                    make_request("p", range(600, 608), max_tokens=4)]}
    assert schedules_with_arrivals(scheduler, arrivals, 2) == [{"d": 4}, {"d": 1}]
    assert [r.request_id for r in scheduler.waiting] == ["s", "p"]
    assert scheduler.deferred_waiting == {"s"}


def test_requests_skipped_for_max_loras_do_not_make_the_engine_capacity_bound() -> None:
    """s waits only because of the adapter limit, not for room: the engine is not
    capacity-bound, so p, arriving while d decodes, is still held."""
    scheduler = make_scheduler(max_loras=1, prefill_schedule_interval=3,
                               behaviour=BEHAVIOUR_0_33)
    arrivals = {0: [make_request("d", range(400, 404), max_tokens=20, ignore_eos=True,
                                 lora_name="adapter-a"),
                    make_request("s", range(500, 504), max_tokens=4, lora_name="adapter-b")],
                1: [make_request("p", range(600, 608), max_tokens=4)]}
    assert schedules_with_arrivals(scheduler, arrivals, 2) == [{"d": 4}, {"d": 1}]
    assert scheduler.cadence.capacity_bound is False


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_two_adapters_scheduled_under_max_loras_1_stop_the_step_as_upstream_does(
        behaviour: Behaviour) -> None:
    """The running phase's adapters must fit `max_loras`: upstream asserts it there, and the
    twin raises `ReleaseCheckFailed('lora-limit')` at the same point (0.32's admission can
    reach it: `conformance/upstream_bugs/lora-limit-assert-032*.jsonl`). Requests without an
    adapter and a second request on the same adapter do not count."""
    scheduler = make_scheduler(max_loras=1, behaviour=behaviour)
    a, a2, b, plain = (make_request(r, range(100, 110), lora_name=lora) for r, lora in (
        ("a", "adapter-a"), ("a2", "adapter-a"), ("b", "adapter-b"), ("p", None)))
    plan = StepPlan(256)
    plan.scheduled_running = [a, a2, plain]
    scheduler._check_running_loras(plan)  # one adapter: within the limit
    plan.scheduled_running = [plain, a, b]
    with pytest.raises(ReleaseCheckFailed) as raised:
        scheduler._check_running_loras(plan)
    assert raised.value.check == "lora-limit"
    assert str(raised.value) == (
        "release check 'lora-limit' fails: the running phase scheduled adapters "
        f"['adapter-a', 'adapter-b'], more than max_loras=1 ({behaviour.release} admission)")
    for limit in (0, 2):  # no LoRA config, or room for both
        make_scheduler(max_loras=limit, behaviour=behaviour)._check_running_loras(plan)


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_async_placeholders_count_down_to_zero_as_outputs_arrive(behaviour: Behaviour) -> None:
    """Async, no drafts, two steps in flight at a time: each step scheduled adds a placeholder,
    each output applied resolves one, and once every output is in there are none left."""
    scheduler = make_scheduler(asynchronous=True, behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 110), max_tokens=5, ignore_eos=True))
    a = scheduler.requests["a"]
    in_flight = [scheduler.schedule(), scheduler.schedule()]
    counts = [a.num_output_placeholders]
    for token in (7, 8):
        scheduler.update_from_output(in_flight.pop(0), ModelRunnerOutput(["a"], {"a": 0},
                                                                         [[token]]))
        counts.append(a.num_output_placeholders)
    in_flight.append(scheduler.schedule())
    counts.append(a.num_output_placeholders)
    scheduler.update_from_output(in_flight.pop(0), ModelRunnerOutput(["a"], {"a": 0}, [[9]]))
    counts.append(a.num_output_placeholders)
    assert counts == [2, 1, 0, 1, 0]
    assert a.output_token_ids == [7, 8, 9] and a.num_computed_tokens == 12


@pytest.mark.parametrize("behaviour", RELEASES, ids=lambda b: b.release)
def test_an_output_of_a_request_preempted_in_flight_leaves_no_placeholders(
        behaviour: Behaviour) -> None:
    """Async: b is preempted while its first step is in flight. Preemption keeps that step's
    placeholder (its token is still coming), the output resolves it, and b finishes on it
    (max_tokens 1) with none left."""
    scheduler = make_scheduler(num_blocks=5, max_num_batched_tokens=64, asynchronous=True,
                               behaviour=behaviour)
    scheduler.add_request(make_request("a", range(100, 132), max_tokens=3))
    scheduler.add_request(make_request("b", range(200, 232), max_tokens=1))
    first = scheduler.schedule()
    second = scheduler.schedule()
    assert second.preempted_req_ids == {"b"}
    b = scheduler.requests["b"]
    assert b.num_output_placeholders == 1
    outputs = scheduler.update_from_output(
        first, ModelRunnerOutput(["a", "b"], {"a": 0, "b": 1}, [[7], [8]]))
    assert [(o.request_id, o.finish_reason) for o in outputs] == [("a", None), ("b", "length")]
    assert b.num_output_placeholders == 0 and scheduler.requests["a"].num_output_placeholders == 1
