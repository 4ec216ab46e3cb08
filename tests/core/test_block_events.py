"""KV-cache events with exact shapes, as upstream emits them (learned by comparing the event
stream in lockstep): what a KV-aware router subscribing to the pool would see."""

from __future__ import annotations

from impl.core.block_pool import BlockPool
from impl.core.events import BlockRemoved, BlockStored

H = [bytes([i]) * 8 for i in range(8)]  # stand-in block hashes


def _pool() -> BlockPool:
    return BlockPool(10, enable_caching=True, hash_block_size=8, enable_kv_cache_events=True)


def test_a_cache_call_whose_blocks_were_all_skipped_still_reports_its_token_range() -> None:
    pool = _pool()
    blocks = [pool.null_block, pool.null_block]
    pool.cache_full_blocks(blocks, H, 0, 2, 1, block_size=16, token_ids=range(32))
    assert pool.take_events() == [BlockStored((), None, tuple(range(32)), 16, None, 1)]
    assert pool.get_num_cached_blocks() == 0


def test_a_prompt_tail_entry_is_announced_with_its_hash_block() -> None:
    pool = _pool()
    [block] = pool.get_new_blocks(1)
    pool.cache_partial_block(block, H[2], 0, parent_hash=H[1], token_ids=range(16, 24))
    assert pool.take_events() == [BlockStored((H[2],), H[1], tuple(range(16, 24)), 8, None, 0)]
    pool.cache_partial_block(block, H[2], 0, parent_hash=H[1], token_ids=range(16, 24))
    assert pool.take_events() == []  # already findable: nothing new to announce


def test_promoting_a_partial_entry_removes_it_before_storing_the_full_hash() -> None:
    pool = _pool()
    first, second = pool.get_new_blocks(2)
    pool.cache_partial_block(second, H[2], 0, parent_hash=H[1], token_ids=range(16, 24))
    pool.take_events()
    pool.cache_full_blocks([first, second], [H[5], H[6]], 0, 2, 0, block_size=16,
                           token_ids=range(32))
    assert pool.take_events() == [
        BlockRemoved((H[2],), 0),
        BlockStored((H[5], H[6]), None, tuple(range(32)), 16, None, 0),
    ]
    assert pool.cached_hashes() == {(0, H[5]), (0, H[6])}


def test_evicting_a_block_with_two_hashes_reports_each_hash_once() -> None:
    pool = _pool()
    [block] = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [H[3]], 0, 1, 0, block_size=16, token_ids=range(16))
    pool.cache_partial_block(block, H[4], 0, token_ids=range(8))
    pool.free_blocks([block])
    pool.take_events()
    pool.get_new_blocks(9)  # the whole free queue: the cached block (at its tail) too
    assert pool.take_events() == [BlockRemoved((H[3],), 0), BlockRemoved((H[4],), 0)]
    pool.check_integrity()
