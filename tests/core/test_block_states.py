"""Block states kept as the pool changes (`impl.core.block_states`): the counts and cached ids a
tracked pool reports equal a walk's after any sequence of pool calls, and its incremental
integrity check finds what a change shows at once and the rest at the next full walk."""

from __future__ import annotations

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from impl.core.block_pool import BlockPool
from vtwin.errors import IntegrityError

OPS = st.lists(st.tuples(st.sampled_from(["new", "touch", "free", "cache", "evict", "reset"]),
                         st.integers(0, 2**16)), max_size=60)


def walked_cached_ids(pool: BlockPool) -> tuple[int, ...]:
    return tuple(b.block_id for b in pool.blocks if b.ref_cnt == 0 and b.block_hash is not None)


def apply(pool: BlockPool, holders: dict[int, int], op: str, arg: int, hashes: list[int]
          ) -> None:
    """One pool call, with `holders` (block id -> references we hold) kept beside it."""
    held = sorted(holders)
    if op == "new":
        for block in pool.get_new_blocks(min(1 + arg % 4, pool.get_num_free_blocks())):
            holders[block.block_id] = holders.get(block.block_id, 0) + 1
    elif op == "touch":
        cached = walked_cached_ids(pool)
        chosen = [i for i in (*cached, *held) if (i + arg) % 3 == 0][:4]
        pool.touch([pool.blocks[i] for i in chosen])
        for i in chosen:
            holders[i] = holders.get(i, 0) + 1
    elif op == "free" and held:
        chosen = [i for i in held if (i + arg) % 2 == 0] or held[:1]
        pool.free_blocks(reversed([pool.blocks[i] for i in chosen]))  # an iterator, as callers
        for i in chosen:
            holders[i] -= 1
            if holders[i] == 0:
                del holders[i]
    elif op == "cache" and held:
        unhashed = [pool.blocks[i] for i in held if pool.blocks[i].block_hash is None][:3]
        keys = []
        for _ in unhashed:  # duplicates now and then: two blocks under one hash
            hashes.append(hashes[-1] if hashes and arg % 5 == 0 else len(hashes))
            keys.append(b"h%d" % hashes[-1])
        pool.cache_full_blocks(unhashed, keys, 0, len(unhashed), 0, block_size=4)
    elif op == "evict":
        pool.evict_blocks([i for i in range(1, pool.num_gpu_blocks) if (i + arg) % 4 == 0])
    elif op == "reset" and not holders:
        assert pool.reset_prefix_cache()


@given(OPS, st.integers(1, 5))
def test_kept_states_equal_a_walk_after_every_call(ops: list[tuple[str, int]],
                                                   full_walk_every: int) -> None:
    pool = BlockPool(12, enable_caching=True, enable_kv_cache_events=False)
    pool.track_changes(full_walk_every)
    holders: dict[int, int] = {}
    hashes: list[int] = []
    for op, arg in ops:
        note(f"{op} {arg}")
        apply(pool, holders, op, arg, hashes)
        assert pool.count_states() == pool.walk_states()
        assert pool.cached_block_ids() == walked_cached_ids(pool)
        pool.check_integrity(holders)  # incremental, or a full walk every few calls


def test_untracked_pools_count_by_walking() -> None:
    pool = BlockPool(6, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, [b"a", b"b"], 0, 2, 0, block_size=4)
    pool.free_blocks(blocks)
    assert pool.tracker is None and pool.changed is None
    assert pool.count_states() == (0, 2, 3)
    assert pool.cached_block_ids() == (1, 2)


def tracked(num_blocks: int = 6, full_walk_every: int = 100) -> BlockPool:
    pool = BlockPool(num_blocks, enable_caching=True, enable_kv_cache_events=False)
    pool.track_changes(full_walk_every)
    return pool


def test_a_block_changed_behind_the_pool_disagrees_with_the_queue_at_once() -> None:
    pool = tracked()
    [block] = pool.get_new_blocks(1)
    pool.free_blocks([block])
    block.ref_cnt = 1  # freed through the pool, then taken back by a bug: still queued
    with pytest.raises(IntegrityError, match="5 blocks queued, 4 counted free"):
        pool.check_integrity()


def test_a_changed_block_that_lost_its_index_entry_is_caught_at_once() -> None:
    pool = tracked()
    [block] = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [b"h"], 0, 1, 0, block_size=4)
    assert pool.hash_map(0).pop(b"h", block.block_id) is block  # a bug drops the entry
    with pytest.raises(IntegrityError, match=r"id=1.*has a hash but is not indexed"):
        pool.check_integrity({1: 1})


def test_a_leaked_block_is_caught_by_counting_held_blocks() -> None:
    pool = tracked()
    pool.get_new_blocks(2)  # 1 and 2; the tables only know of 1
    with pytest.raises(IntegrityError, match="2 active blocks, 1 held by a block table"):
        pool.check_integrity({1: 1})
    with pytest.raises(IntegrityError, match=r"id=2.*ref_cnt 1 != 2 holders"):
        pool.check_integrity({1: 1, 2: 2})


def test_a_changed_block_with_broken_links_is_caught() -> None:
    pool = tracked()
    [block] = pool.get_new_blocks(1)
    pool.free_blocks([block])
    assert block.prev_free is not None
    block.prev_free.next_free = block.next_free  # unlinked one way only
    with pytest.raises(IntegrityError, match="id=1.*broken free-queue links"):
        pool.check_integrity()


def test_what_no_change_shows_waits_for_the_next_full_walk() -> None:
    pool = tracked(full_walk_every=3)
    pool.blocks[4].block_hash = b"ghost"  # no pool call: the tracker does not see it
    pool.check_integrity()
    pool.check_integrity()
    with pytest.raises(IntegrityError, match=r"id=4.*has a hash but is not indexed"):
        pool.check_integrity()  # the third check walks


def test_the_full_walk_proves_the_kept_states() -> None:
    pool = tracked(full_walk_every=1)
    block = pool.blocks[3]
    block.block_hash = b"quiet"  # cached as far as a walk can tell, indexed and all ...
    block.hash_group_id = 0
    pool.hash_map(0).insert(b"quiet", block)
    with pytest.raises(IntegrityError, match=r"kept active/cached/empty \(0, 0, 5\) != "
                                             r"\(0, 1, 4\) walked"):
        pool.check_integrity()  # ... but the tracker still holds it empty


def test_full_walk_every_must_be_positive() -> None:
    pool = BlockPool(4, enable_caching=True, enable_kv_cache_events=False)
    with pytest.raises(ValueError, match="full_walk_every must be >= 1"):
        pool.track_changes(0)


def test_tracking_started_on_a_used_pool_keeps_its_cached_blocks() -> None:
    pool = BlockPool(6, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks[:2], [b"a", b"b"], 0, 2, 0, block_size=4)
    pool.free_blocks(blocks[:2])
    tracker = pool.track_changes(1)
    assert tracker.cached == {1, 2}
    assert pool.count_states() == (1, 2, 2) and pool.cached_block_ids() == (1, 2)
    pool.check_integrity({3: 1})


def test_the_whole_pool_is_walked_every_full_walk_every_checks_exactly() -> None:
    pool = tracked(full_walk_every=2)
    for _ in range(2):  # a fault only a walk sees: found at checks 2 and 4, never 3
        pool.blocks[4].block_hash = b"ghost"
        pool.check_integrity()
        with pytest.raises(IntegrityError, match=r"id=4.*has a hash but is not indexed"):
            pool.check_integrity()
        pool.blocks[4].block_hash = None


def test_the_walk_proves_each_kept_state_not_only_the_counts() -> None:
    pool = tracked(full_walk_every=1)
    [block] = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [b"h"], 0, 1, 0, block_size=4)
    pool.free_blocks([block])
    pool.count_states()  # kept: 1 cached, 2 empty
    tracker = pool.tracker
    assert tracker is not None
    tracker.states[1], tracker.states[2] = tracker.states[2], tracker.states[1]  # same counts
    with pytest.raises(IntegrityError, match=r"id=1.*kept as state 2, is 1"):
        pool.check_integrity()


def test_the_null_block_among_the_holders_is_skipped_not_the_end_of_them() -> None:
    pool = tracked()
    pool.get_new_blocks(2)
    pool.check_integrity({0: 3, 1: 1, 2: 1})  # the null block first: still 2 held, 2 active
    with pytest.raises(IntegrityError, match="2 active blocks, 1 held"):
        pool.check_integrity({0: 3, 1: 1})
