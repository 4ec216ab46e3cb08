"""Operator controls on the twin's scheduler: pauses and prefix-cache resets between steps."""

from __future__ import annotations

from impl.sched.output import DraftTokenIds
from impl.sched.pause import PauseState
from tests.sched.helpers import make_request, make_scheduler, scheduled, step


def test_paused_for_new_requests_running_ones_go_on_and_arrivals_wait() -> None:
    s = make_scheduler(max_num_batched_tokens=64, long_prefill_token_threshold=16)
    s.add_request(make_request("a", range(100, 140)))
    step(s)  # a alone: the threshold does not apply, 40 tokens
    s.set_pause_state(PauseState.PAUSED_NEW)
    s.add_request(make_request("b", range(200, 220)))
    assert s.get_num_unfinished_requests() == 1  # b is held back: it does not count
    out, _ = step(s)
    assert scheduled(out) == {"a": 1}
    s.set_pause_state(PauseState.UNPAUSED)
    out, _ = step(s)
    assert scheduled(out) == {"a": 1, "b": 16}  # two compete now: the threshold applies


def test_paused_for_all_nothing_is_scheduled_and_the_engine_has_nothing_to_step() -> None:
    s = make_scheduler()
    s.add_request(make_request("a", range(100, 140)))
    step(s)
    s.set_pause_state(PauseState.PAUSED_ALL)
    assert not s.has_requests()
    out = s.schedule()
    assert scheduled(out) == {} and out.total_num_scheduled_tokens == 0


def test_a_reset_is_refused_while_blocks_are_in_use_and_forgets_prefixes_when_idle() -> None:
    s = make_scheduler()
    s.add_request(make_request("a", range(100, 148), max_tokens=2))
    step(s)
    assert not s.reset_prefix_cache()  # a runs: its blocks are in use
    step(s)
    assert s.kv_cache_manager.block_pool.get_num_cached_blocks() == 3
    assert s.reset_prefix_cache()  # a finished: its blocks are free, their hashes go
    assert s.kv_cache_manager.block_pool.get_num_cached_blocks() == 0
    s.add_request(make_request("b", range(100, 148)))
    out, _ = step(s)
    assert out.scheduled_new_reqs[0].num_computed_tokens == 0  # no hit left


def test_a_reset_preempting_running_requests_succeeds_and_reports_them_next_step() -> None:
    s = make_scheduler()
    for rid, base in (("a", 100), ("b", 200)):
        s.add_request(make_request(rid, range(base, base + 40)))
    step(s)
    assert not s.reset_prefix_cache()
    assert s.reset_prefix_cache(reset_running_requests=True)
    assert [r.request_id for r in s.waiting] == ["a", "b"]  # they resume in their order
    out, _ = step(s)
    assert out.preempted_req_ids == {"a", "b"}
    assert out.scheduled_cached_reqs.resumed_req_ids == {"a", "b"}
    assert scheduled(out) == {"a": 41, "b": 41}  # recomputed from scratch, no prefix left
    s.check_integrity()


def test_with_stats_off_nothing_is_kept_or_reported() -> None:
    from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from impl.sched.config import SchedulerConfig
    from impl.sched.scheduler import Scheduler
    from tests.sched.helpers import NONE_HASH

    s = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                                  num_spec_tokens=2),
                  KVCacheConfig(33, (KVCacheGroupSpec(("layer",), FullAttentionSpec(16)),)),
                  none_hash=NONE_HASH, log_stats=False)
    s.add_request(make_request("a", range(100, 140)))
    step(s)
    s.update_draft_token_ids(DraftTokenIds(["a"], [[7, 7]]))
    step(s)  # drafts verified: no spec-decoding stats either
    assert s.make_stats() is None
    assert s.kv_cache_manager.prefix_cache_stats is None
    assert s.spec_decoding_stats is None


def test_a_connector_reset_without_a_connector_succeeds() -> None:
    """reset_connector with no connector configured: nothing to reset, so only the prefix
    cache decides (upstream treats it as a no-op success)."""
    scheduler = make_scheduler()
    assert scheduler.reset_connector_cache()
    assert scheduler.reset_prefix_cache(reset_connector=True)
