import pytest

from impl.core.specs import FullAttentionSpec, SlidingWindowSpec
from tests.core.helpers import admit, make_manager, make_request


def test_prefix_hit_shares_full_blocks_and_caps_at_num_tokens_minus_one() -> None:
    manager = make_manager(11)
    a = make_request("a", range(12))
    assert admit(manager, a) == [[1, 2, 3]]
    b = make_request("b", range(12))
    hits, num_hit = manager.get_computed_blocks(b)
    # All 12 tokens are cached, but the last token must be recomputed: 2 blocks hit.
    assert num_hit == 8 and hits.get_block_ids() == ([1, 2],)
    assert admit(manager, b) == [[1, 2, 4]]
    assert manager.block_pool.blocks[1].ref_cnt == 2


def test_freeing_puts_the_tail_first_in_eviction_order() -> None:
    manager = make_manager(11)
    a = make_request("a", range(10))  # 2 full blocks + 2 tokens
    admit(manager, a)
    manager.free(a)
    manager.check_integrity()
    # Block 3 (partial, unhashed) goes to the front; hashed 2 then 1 to the tail.
    assert manager.block_pool.free_block_queue.block_ids() == [3, 4, 5, 6, 7, 8, 9, 10, 2, 1]


def test_allocation_failure_changes_nothing() -> None:
    manager = make_manager(4)  # 3 usable blocks
    a = make_request("a", range(8))
    admit(manager, a)
    before = manager.block_pool.free_block_queue.block_ids()
    b = make_request("b", range(100, 112))
    assert admit(manager, b) is None
    assert manager.block_pool.free_block_queue.block_ids() == before
    assert manager.get_block_ids("b") == ([],)


def test_lookahead_slots_are_allocated_but_not_cached() -> None:
    manager = make_manager(11)
    a = make_request("a", range(4))
    assert admit(manager, a, lookahead=5) == [[1, 2, 3]]
    assert manager.block_pool.get_num_cached_blocks() == 1


def test_decode_appends_blocks_as_tokens_arrive() -> None:
    manager = make_manager(11)
    a = make_request("a", range(4))
    admit(manager, a)
    a.append_output_token_ids(99)
    new = manager.allocate_slots(a, 1)
    assert new is not None and new.get_block_ids() == ([2],)


def test_prefix_caching_off_never_hits() -> None:
    manager = make_manager(11, caching=False)
    admit(manager, make_request("a", range(8)))
    b = make_request("b", range(8))
    assert manager.get_computed_blocks(b)[1] == 0
    assert manager.block_pool.get_num_cached_blocks() == 0


def test_salted_requests_do_not_share() -> None:
    manager = make_manager(11)
    admit(manager, make_request("a", range(9)))
    assert manager.get_computed_blocks(make_request("b", range(9), cache_salt="x"))[1] == 0


def test_sliding_window_replaces_left_blocks_by_null() -> None:
    manager = make_manager(20, FullAttentionSpec(block_size=4),
                           SlidingWindowSpec(block_size=4, sliding_window=4))
    a = make_request("a", range(8))
    admit(manager, a, num_new=8)
    a.append_output_token_ids(5)
    assert manager.allocate_slots(a, 1) is not None
    a.num_computed_tokens = 9
    full, window = manager.get_block_ids("a")
    assert len(full) == 3 and window[0] == 0  # block 0 of the window group is now null
    manager.check_integrity()


def test_unitary_group_rejects_a_smaller_hash_block_size() -> None:
    with pytest.raises(ValueError, match="hash_block_size"):
        make_manager(10, FullAttentionSpec(block_size=32), hash_block_size=16)


def test_prefix_cache_stats_count_lookups() -> None:
    manager = make_manager(11)
    a = make_request("a", range(8))
    admit(manager, a)
    b = make_request("b", range(8))
    _, num_hit = manager.get_computed_blocks(b)
    manager.record_prefix_cache_stats(b, num_hit)
    stats = manager.make_prefix_cache_stats()
    assert stats is not None and (stats.requests, stats.queries, stats.hits) == (1, 8, 4)


def test_reset_prefix_cache_is_refused_while_blocks_are_in_use_and_flagged_in_stats() -> None:
    """A reset empties the index only when no request holds a block (as upstream: running
    requests would keep pointing at blocks the cache forgot); a successful one is reported
    once, in the next stats."""
    manager = make_manager(11)
    a = make_request("a", range(8))
    admit(manager, a)
    assert manager.reset_prefix_cache() is False
    stats = manager.make_prefix_cache_stats()
    assert stats is not None and stats.reset is False
    manager.free(a)
    assert manager.reset_prefix_cache() is True
    assert manager.get_computed_blocks(make_request("b", range(8)))[1] == 0
    stats = manager.make_prefix_cache_stats()
    assert stats is not None and stats.reset is True
    stats = manager.make_prefix_cache_stats()
    assert stats is not None and stats.reset is False


def test_the_smallest_context_and_no_groups() -> None:
    from impl.core.kv_cache_manager import KVCacheManager
    from impl.core.specs import KVCacheConfig, KVCacheGroupSpec

    flags = {"enable_caching": True, "log_stats": False, "enable_kv_cache_events": False}
    group = KVCacheGroupSpec(("l",), FullAttentionSpec(block_size=4))
    assert KVCacheManager(KVCacheConfig(4, (group,)), max_model_len=1, **flags).max_model_len == 1
    with pytest.raises(ValueError, match="max_model_len: must be >= 1"):
        KVCacheManager(KVCacheConfig(4, (group,)), max_model_len=0, **flags)
    with pytest.raises(ValueError, match="needs at least one KV cache group"):
        KVCacheManager(KVCacheConfig(4, ()), max_model_len=16, **flags)
