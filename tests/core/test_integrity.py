"""`check_integrity()` catches corrupted structures with `IntegrityError`, also under `python -O`.

Each test builds a healthy structure, corrupts one field the way a bug would, and expects the
check to name what broke. The last test reruns a corruption in a `python -O` subprocess: an
`assert`-based check would vanish there and let a broken twin pass the gate silently.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from impl.core.block import FreeKVCacheBlockQueue, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.specs import FullAttentionSpec, SlidingWindowSpec
from tests.core.helpers import admit, make_manager, make_request
from vtwin.errors import IntegrityError

ROOT = Path(__file__).resolve().parents[2]


def test_a_healthy_pool_counts_active_cached_and_empty_blocks() -> None:
    pool = BlockPool(6, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(3)  # 1, 2, 3 active
    pool.cache_full_blocks(blocks, [b"h1"], 0, 1, 0, block_size=4)
    pool.free_blocks([blocks[0]])  # 1: cached and free
    assert pool.count_states() == (2, 1, 2)  # active 2, 3; cached 1; empty 4, 5
    pool.check_integrity({2: 1, 3: 1})


def test_a_block_lost_from_queue_and_tables_breaks_conservation() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    lost = pool.free_block_queue.popleft()  # neither free nor referenced any more
    assert lost.block_id == 1
    with pytest.raises(IntegrityError, match=r"active 0 \+ cached 0 \+ empty 3 != 4 usable"):
        pool.check_integrity()


def test_a_referenced_block_left_in_the_queue_breaks_conservation() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    pool.blocks[2].ref_cnt = 1  # in use, yet still queued: counted twice
    with pytest.raises(IntegrityError, match=r"active 1 \+ cached 0 \+ empty 4 != 4 usable"):
        pool.check_integrity()


def test_a_ref_count_that_disagrees_with_the_tables_is_caught() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    pool.get_new_blocks(2)  # 1, 2
    with pytest.raises(IntegrityError, match=r"id=2.*ref_cnt 1 != 0 holders"):
        pool.check_integrity({1: 1})


def test_a_hash_missing_from_the_index_is_caught() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    pool.blocks[3].block_hash = b"ghost"  # free, hashed, but no index entry points at it
    with pytest.raises(IntegrityError, match=r"id=3.*has a hash but is not indexed"):
        pool.check_integrity()


def test_the_first_usable_block_is_checked_too() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    pool.blocks[1].block_hash = b"ghost"
    with pytest.raises(IntegrityError, match=r"id=1.*has a hash but is not indexed"):
        pool.check_integrity()


def test_a_null_block_that_lost_its_mark_is_caught() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    pool.null_block.is_null = False
    with pytest.raises(IntegrityError, match="block pool: null block is"):
        pool.check_integrity()


def test_an_index_entry_in_the_wrong_group_is_caught() -> None:
    pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
    [block] = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [b"h"], 0, 1, 0, block_size=4)
    block.hash_group_id = 1  # under its own hash, but in group 0's index
    with pytest.raises(IntegrityError, match="block pool: index entry"):
        pool.check_integrity({block.block_id: 1})


def test_a_free_queue_link_broken_one_way_is_caught() -> None:
    blocks = [KVCacheBlock(1), KVCacheBlock(2), KVCacheBlock(3)]
    queue = FreeKVCacheBlockQueue(blocks)
    blocks[2].prev_free = blocks[0]  # 2 -> 3 forward, but 3 says 1 is before it
    with pytest.raises(IntegrityError, match="free queue: broken link after .*id=2"):
        queue.check_integrity()


def test_a_free_queue_count_off_by_one_is_caught() -> None:
    queue = FreeKVCacheBlockQueue([KVCacheBlock(1), KVCacheBlock(2)])
    queue.num_free_blocks = 3
    with pytest.raises(IntegrityError, match="2 blocks linked, 3 counted"):
        queue.check_integrity()


def test_a_free_queue_cycle_is_caught() -> None:
    blocks = [KVCacheBlock(1), KVCacheBlock(2)]
    queue = FreeKVCacheBlockQueue(blocks)
    blocks[1].next_free, blocks[0].prev_free = blocks[0], blocks[1]
    with pytest.raises(IntegrityError, match="queued twice|broken link"):
        queue.check_integrity()


def test_a_block_table_holding_a_free_block_is_caught() -> None:
    manager = make_manager(10, FullAttentionSpec(block_size=4))
    request = make_request("a", range(10))
    assert admit(manager, request) == [[1, 2, 3]]
    manager.coordinator.managers[0].req_to_blocks["a"][1].ref_cnt = 0
    with pytest.raises(IntegrityError, match="group 0: a holds free"):
        manager.check_integrity()


def test_the_manager_checks_ref_counts_against_every_block_table() -> None:
    """One reference too many (a leaked `touch`) keeps the block active and out of the queue,
    so only counting the holders over all block tables finds it."""
    manager = make_manager(10, FullAttentionSpec(block_size=4))
    request = make_request("a", range(10))
    assert admit(manager, request) == [[1, 2, 3]]
    manager.coordinator.managers[0].req_to_blocks["a"][2].ref_cnt = 2
    with pytest.raises(IntegrityError, match=r"id=3.*ref_cnt 2 != 1 holders"):
        manager.check_integrity()


def test_a_cached_count_beyond_the_table_is_caught() -> None:
    manager = make_manager(10, FullAttentionSpec(block_size=4),
                           SlidingWindowSpec(block_size=4, sliding_window=4))
    request = make_request("a", range(10))
    assert admit(manager, request) == [[1, 2, 3], [4, 5, 6]]
    manager.coordinator.managers[1].num_cached_block["a"] = 9
    with pytest.raises(IntegrityError, match="group 1: a has 9 cached of 3 blocks"):
        manager.check_integrity()


def test_the_checks_survive_python_dash_o() -> None:
    script = textwrap.dedent("""
        import sys
        from impl.core.block_pool import BlockPool
        from vtwin.errors import IntegrityError
        if __debug__:
            sys.exit("not running under -O")
        pool = BlockPool(5, enable_caching=True, enable_kv_cache_events=False)
        pool.free_block_queue.popleft()
        try:
            pool.check_integrity()
        except IntegrityError as error:
            print(error)
        else:
            sys.exit("corruption went unnoticed under -O")
    """)
    done = subprocess.run([sys.executable, "-O", "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "active 0 + cached 0 + empty 3 != 4 usable blocks" in done.stdout
