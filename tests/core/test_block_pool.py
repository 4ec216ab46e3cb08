import pytest

from impl.core.block_pool import BlockPool
from impl.core.events import AllBlocksCleared, BlockRemoved, BlockStored


def ids(blocks: list) -> list[int]:  # type: ignore[type-arg]
    return [b.block_id for b in blocks]


def test_block_zero_is_the_null_block_and_never_free() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 4
    assert ids(pool.get_new_blocks(4)) == [1, 2, 3, 4]
    pool.check_integrity({1: 1, 2: 1, 3: 1, 4: 1})


def test_freed_unhashed_blocks_go_to_the_front_hashed_to_the_tail() -> None:
    pool = BlockPool(6, enable_caching=True, enable_kv_cache_events=False)
    a = pool.get_new_blocks(3)  # 1, 2, 3
    pool.cache_full_blocks(a, [b"h1", b"h2"], 0, 2, 0, block_size=4)
    # A request frees tail first: 3 (no hash), 2, 1 (hashed).
    pool.free_blocks(list(reversed(a)))
    assert pool.free_block_queue.block_ids() == [3, 4, 5, 2, 1]
    pool.check_integrity({})


def test_eviction_takes_the_least_recently_freed_cached_block() -> None:
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=True)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, [b"a", b"b", b"c"], 0, 3, 0, block_size=4,
                           token_ids=list(range(12)))
    pool.free_blocks(reversed(blocks))  # queue: 3, 2, 1 (all hashed)
    assert pool.free_block_queue.block_ids() == [3, 2, 1]
    assert ids(pool.get_new_blocks(1)) == [3]
    assert pool.get_cached_block(b"c", [0]) is None
    assert ids(pool.get_cached_block(b"a", [0]) or []) == [1]
    events = pool.take_events()
    assert isinstance(events[0], BlockStored) and events[0].block_hashes == (b"a", b"b", b"c")
    assert events[1] == BlockRemoved(block_hashes=(b"c",), group_id=0)
    pool.check_integrity({3: 1})


def test_touch_revives_a_cached_free_block() -> None:
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, [b"a", b"b"], 0, 2, 0, block_size=4)
    pool.free_blocks(reversed(blocks))
    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 1
    assert pool.free_block_queue.block_ids() == [3, 2]
    pool.check_integrity({1: 1})


def test_duplicate_hashes_return_the_first_cached_block() -> None:
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=False)
    first, second = pool.get_new_blocks(2)
    pool.cache_full_blocks([first], [b"x"], 0, 1, 0, block_size=4)
    pool.cache_full_blocks([second], [b"x"], 0, 1, 0, block_size=4)
    assert pool.get_cached_block(b"x", [0]) == [first]
    pool.evict_blocks({first.block_id})
    assert pool.get_cached_block(b"x", [0]) == [second]
    pool.check_integrity({1: 1, 2: 1})


def test_groups_are_cached_independently() -> None:
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=False)
    a, b = pool.get_new_blocks(2)
    pool.cache_full_blocks([a], [b"x"], 0, 1, 0, block_size=4)
    assert pool.get_cached_block(b"x", [0, 1]) is None
    pool.cache_full_blocks([b], [b"x"], 0, 1, 1, block_size=4)
    assert pool.get_cached_block(b"x", [0, 1]) == [a, b]


def test_a_group_caching_first_leaves_lower_groups_empty() -> None:
    """Group 2 caches before groups 0 and 1 have anything: they miss, its entry is found,
    counted and listed, and evicting its block drops it from group 2 only."""
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=False)
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [b"x"], 0, 1, 2, block_size=4)
    assert pool.get_cached_block(b"x", [0]) is None
    assert pool.get_cached_block(b"x", [1]) is None
    assert pool.get_cached_block(b"x", [3]) is None  # a group past every map
    assert pool.get_cached_block(b"x", [2]) == [block]
    assert pool.get_num_cached_blocks() == 1 and pool.cached_hashes() == {(2, b"x")}
    pool.check_integrity({block.block_id: 1})
    pool.free_blocks([block])
    pool.evict_blocks([block.block_id])
    assert block.block_hash is None and pool.get_num_cached_blocks() == 0
    assert pool.get_cached_block(b"x", [2]) is None
    assert pool.take_events() == []  # events are off: eviction queues none
    pool.check_integrity({})
    with pytest.raises(ValueError, match="group_id must be >= 0"):
        pool.hash_map(-1)


def test_reset_prefix_cache_only_when_nothing_is_in_use() -> None:
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=True)
    blocks = pool.get_new_blocks(1)
    pool.cache_full_blocks(blocks, [b"x"], 0, 1, 0, block_size=4)
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True
    assert pool.get_num_cached_blocks() == 0 and blocks[0].block_hash is None
    assert isinstance(pool.take_events()[-1], AllBlocksCleared)
    pool.check_integrity({})


def test_usage_counts_only_usable_blocks() -> None:
    pool = BlockPool(5, enable_caching=False, enable_kv_cache_events=False)
    pool.get_new_blocks(2)
    assert pool.get_usage() == pytest.approx(0.5)


def test_usage_of_the_smallest_pools() -> None:
    """A pool of one block has only the null block: nothing usable, usage 0 (not a division by
    zero); a pool of two has one usable block, fully used once it is handed out."""
    assert BlockPool(1, enable_caching=True, enable_kv_cache_events=False).get_usage() == 0.0
    pool = BlockPool(2, enable_caching=True, enable_kv_cache_events=False)
    assert pool.get_usage() == 0.0
    (block,) = pool.get_new_blocks(1)
    assert pool.get_usage() == 1.0
    pool.free_blocks([block])
    assert pool.get_usage() == 0.0


def test_asking_for_too_many_blocks_raises_and_keeps_state() -> None:
    pool = BlockPool(3, enable_caching=True, enable_kv_cache_events=False)
    with pytest.raises(ValueError, match="Cannot get 3 free blocks"):
        pool.get_new_blocks(3)
    assert pool.get_num_free_blocks() == 2
    pool.check_integrity({})
