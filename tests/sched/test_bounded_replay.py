"""Bounded replay (DeepSeek-V4.1 sliding windows, `impl.sched.replay`): a prefix hit found by
the full-attention group is taken whole, but the request restarts a window before its end so
the window group (which keeps no prefix cache) is rebuilt; a hit no longer than the window is
dropped. Exact counts and block ids, checked against upstream 0.32.0 by the suite workload
`hybrid-bounded-replay` and the Hypothesis "replay" layouts."""

from __future__ import annotations

import pytest

from impl.core.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from impl.sched.config import SchedulerConfig
from impl.sched.replay import prefix_replay_window
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import NONE_HASH, make_request, step

PROMPT = list(range(1000, 1100))  # 100 tokens: a resend hits 6 full blocks (96 tokens)


def _scheduler(window: int, bounded_replay: bool = True) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=256, max_model_len=512,
                             block_size=16)
    kv_config = KVCacheConfig(40, (
        KVCacheGroupSpec(("full",), FullAttentionSpec(block_size=16)),
        KVCacheGroupSpec(("window",), SlidingWindowSpec(block_size=16, sliding_window=window,
                                                        bounded_replay=bounded_replay))))
    return Scheduler(config, kv_config, none_hash=NONE_HASH, log_stats=True)


def _run_first(scheduler: Scheduler) -> list[int]:
    """Run a first request with PROMPT to its end (its blocks stay cached); its full-attention
    block ids."""
    scheduler.add_request(make_request("a", PROMPT, max_tokens=1))
    output, _ = step(scheduler)
    assert "a" not in scheduler.requests  # finished after its one token
    return list(output.scheduled_new_reqs[0].block_ids[0])


def test_a_hit_restarts_one_window_before_its_end() -> None:
    scheduler = _scheduler(window=32)
    first = _run_first(scheduler)
    scheduler.add_request(make_request("b", PROMPT, max_tokens=1))
    output, _ = step(scheduler)
    (new,) = output.scheduled_new_reqs
    assert (new.num_computed_tokens, new.replay_start) == (64, 64)
    assert list(new.block_ids[0][:6]) == first[:6]  # the whole hit is adopted
    assert output.num_scheduled_tokens["b"] == 36  # the 32 replayed + the 4 past the hit
    full, window = new.block_ids
    assert len(full) == 7  # the 6 hit blocks, and one for the tokens past the hit
    # The window keeps no cache: its 4 blocks left of the window of token 96 (tokens 65..96)
    # are null, the 3 others fresh (the replay starts in block 4, at token 64).
    assert len(window) == 7 and window[:4] == [0] * 4
    assert 0 not in window[4:] and not set(window) & set(full)


def test_a_hit_no_longer_than_the_window_is_dropped() -> None:
    scheduler = _scheduler(window=96)  # the hit is 96 tokens: exactly the window
    first = _run_first(scheduler)
    scheduler.add_request(make_request("b", PROMPT, max_tokens=2))
    output, _ = step(scheduler)
    (new,) = output.scheduled_new_reqs
    assert (new.num_computed_tokens, new.replay_start) == (0, 0)
    assert output.num_scheduled_tokens["b"] == 100
    assert not set(new.block_ids[0]) & set(first)  # no hit block taken: all fresh
    assert scheduler.requests["b"].num_cached_tokens == 0


def test_the_window_group_indexes_nothing_and_a_plain_window_does() -> None:
    replayed = _scheduler(window=32)
    _run_first(replayed)
    plain = _scheduler(window=32, bounded_replay=False)
    _run_first(plain)
    for scheduler, window_cached in ((replayed, False), (plain, True)):
        groups = {group for group, _ in scheduler.kv_cache_manager.block_pool.cached_hashes()}
        assert 0 in groups
        assert (1 in groups) is window_cached


def test_no_replay_without_a_bounded_replay_group() -> None:
    scheduler = _scheduler(window=32, bounded_replay=False)
    _run_first(scheduler)
    scheduler.add_request(make_request("b", PROMPT, max_tokens=1))
    output, _ = step(scheduler)
    (new,) = output.scheduled_new_reqs
    assert (new.num_computed_tokens, new.replay_start) == (96, 0)


def test_one_replay_window_per_engine() -> None:
    def config(*windows: int) -> KVCacheConfig:
        return KVCacheConfig(40, (KVCacheGroupSpec(("full",), FullAttentionSpec(block_size=16)),
                                  *(KVCacheGroupSpec((f"w{w}",), SlidingWindowSpec(
                                      block_size=16, sliding_window=w, bounded_replay=True))
                                    for w in windows),
                                  KVCacheGroupSpec(("m",), MambaSpec(block_size=16))))
    assert prefix_replay_window(config()) == 0
    assert prefix_replay_window(config(32, 32)) == 32
    with pytest.raises(ValueError, match="one window"):
        prefix_replay_window(config(32, 48))
