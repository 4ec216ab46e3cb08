"""The full-sequence admission gate reserves, for a block-recycling group, only the blocks a
request can hold at once (upstream's per-request admission cap), not its whole prompt.

Found by the random scheduler lockstep (`conformance/regressions/swa-admission-cap.jsonl`):
the twin refused a long prompt that upstream admitted beside a sliding-window group."""

from __future__ import annotations

import pytest

from impl.core.hashing import make_none_hash
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.request_hasher import RequestBlockHasher
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    SlidingWindowSpec,
)
from impl.sched.config import SchedulerConfig
from impl.sched.request import Request


def _manager(second: KVCacheSpec, max_in_flight_tokens: int | None) -> KVCacheManager:
    groups = (KVCacheGroupSpec(("full",), FullAttentionSpec(block_size=16)),
              KVCacheGroupSpec(("other",), second))
    return KVCacheManager(KVCacheConfig(14, groups), max_model_len=128,
                          enable_caching=False, log_stats=False, enable_kv_cache_events=False,
                          max_in_flight_tokens=max_in_flight_tokens)


def _admit_first_chunk(manager: KVCacheManager) -> list[list[int]] | None:
    hasher = RequestBlockHasher(16, "sha256", make_none_hash("sha256", "0"))
    request = Request("b", range(1000, 1097), block_hasher=hasher)  # 97 tokens: 7 blocks
    blocks = manager.allocate_slots(request, 32, full_sequence_must_fit=True)
    manager.check_integrity()
    return None if blocks is None else [list(ids) for ids in blocks.get_block_ids()]


@pytest.mark.parametrize(("second", "cap"), [
    # window 32, 32 tokens in flight: cdiv(31 + 32, 16) + 1 blocks
    (SlidingWindowSpec(block_size=16, sliding_window=32), 5),
    # chunk 32 + 32 in flight: cdiv(64, 16) blocks
    (ChunkedLocalAttentionSpec(block_size=16, attention_chunk_size=32), 4),
])
def test_recycling_groups_reserve_their_cap_not_the_whole_prompt(
        second: KVCacheSpec, cap: int) -> None:
    manager = _manager(second, max_in_flight_tokens=32)
    assert manager.coordinator.managers[1].admission_cap_blocks == cap
    # 13 usable blocks >= 7 (full) + cap: the first 32-token chunk is admitted.
    assert _admit_first_chunk(manager) == [[1, 2], [3, 4]]


def test_without_in_flight_bound_the_whole_prompt_counts() -> None:
    # Cap from max_model_len (128 in flight): cdiv(31 + 128 capped at 128, 16) + 1 = 9 >= 7,
    # so the window group reserves all 7 prompt blocks: 14 > 13 usable, refused.
    manager = _manager(SlidingWindowSpec(block_size=16, sliding_window=32), None)
    assert _admit_first_chunk(manager) is None
    assert manager.block_pool.get_num_free_blocks() == 13


def test_the_in_flight_bound_doubles_under_async_scheduling() -> None:
    sync = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=48, max_model_len=512)
    assert sync.max_in_flight_tokens == 48
    overlapped = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=48, max_model_len=512,
                                 async_scheduling=True)
    assert overlapped.max_in_flight_tokens == 96


def test_the_cap_is_for_the_admission_gate_only_not_the_allocation() -> None:
    """Allocating 97 tokens at once takes 7 blocks per group, window or not (nothing has left
    the window yet): 14 > 13 usable, refused, although the window group's cap is 5."""
    manager = _manager(SlidingWindowSpec(block_size=16, sliding_window=32), 32)
    hasher = RequestBlockHasher(16, "sha256", make_none_hash("sha256", "0"))
    request = Request("b", range(1000, 1097), block_hasher=hasher)
    assert manager.allocate_slots(request, 97) is None
    assert manager.block_pool.get_num_free_blocks() == 13


def test_the_gate_counts_the_pool_before_out_of_window_blocks_are_given_back() -> None:
    """A waiting request that already holds blocks (a streaming session whose next part
    arrived) passes the full-sequence gate only if the pool as it stands can hold what the
    whole sequence still needs; the blocks it holds outside its window are given back after
    the gate, not before. Regressions: `conformance/regressions/session-*-part*.jsonl`."""
    groups = (KVCacheGroupSpec(("full",), FullAttentionSpec(block_size=16)),
              KVCacheGroupSpec(("window",), SlidingWindowSpec(block_size=16, sliding_window=8)))
    manager = KVCacheManager(KVCacheConfig(16, groups), max_model_len=256,
                             enable_caching=False, log_stats=False,
                             enable_kv_cache_events=False, max_in_flight_tokens=256)
    hasher = RequestBlockHasher(16, "sha256", make_none_hash("sha256", "0"))
    request = Request("s", range(1000, 1123), block_hasher=hasher)  # 111 computed + 12 new
    assert manager.allocate_slots(request, 111) is not None
    request.num_computed_tokens = 111
    assert manager.block_pool.get_num_free_blocks() == 1
    # The whole sequence needs one more block per group: 2 > 1 free, refused; the six blocks
    # now outside the window are still held (freeing them first would leave 7 free).
    assert manager.allocate_slots(request, 12, full_sequence_must_fit=True) is None
    assert manager.get_block_ids("s") == ([1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14])
    assert manager.block_pool.get_num_free_blocks() == 1
    manager.check_integrity()
    # Without the gate (a running request) they are given back first and the part fits.
    blocks = manager.allocate_slots(request, 12)
    assert blocks is not None and blocks.get_block_ids() == ([13], [12])
    assert manager.get_block_ids("s") == ([1, 2, 3, 4, 5, 6, 7, 13], [0, 0, 0, 0, 0, 0, 14, 12])
