import pytest

from impl.core.block import FreeKVCacheBlockQueue, KVCacheBlock
from vtwin.errors import IntegrityError


def queue_of(n: int) -> tuple[FreeKVCacheBlockQueue, list[KVCacheBlock]]:
    blocks = [KVCacheBlock(i) for i in range(n)]
    return FreeKVCacheBlockQueue(blocks), blocks


def test_initial_order_is_block_id_order() -> None:
    queue, _ = queue_of(5)
    assert queue.block_ids() == [0, 1, 2, 3, 4]
    assert queue.num_free_blocks == 5


def test_popleft_and_popleft_n_take_from_the_head() -> None:
    queue, _ = queue_of(5)
    assert queue.popleft().block_id == 0
    assert [b.block_id for b in queue.popleft_n(3)] == [1, 2, 3]
    assert queue.block_ids() == [4]
    assert queue.popleft_n(0) == []


def test_remove_from_the_middle_and_append_to_tail() -> None:
    queue, blocks = queue_of(5)
    queue.remove(blocks[2])
    assert queue.block_ids() == [0, 1, 3, 4]
    queue.append(blocks[2])
    assert queue.block_ids() == [0, 1, 3, 4, 2]
    queue.check_integrity()


def test_prepend_n_keeps_the_given_order_at_the_front() -> None:
    queue, blocks = queue_of(5)
    taken = queue.popleft_n(3)
    queue.prepend_n([taken[2], taken[0]])
    assert queue.block_ids() == [2, 0, 3, 4]


def test_popping_more_than_free_is_an_error_and_changes_nothing() -> None:
    queue, _ = queue_of(2)
    with pytest.raises(ValueError, match="only 2 are free"):
        queue.popleft_n(3)
    assert queue.block_ids() == [0, 1]


def test_integrity_catches_a_referenced_block_in_the_queue() -> None:
    queue, blocks = queue_of(3)
    blocks[1].ref_cnt = 1
    with pytest.raises(IntegrityError, match="ref_cnt"):
        queue.check_integrity()


def test_after_walks_from_a_queued_block_and_yields_nothing_for_an_unqueued_one() -> None:
    queue, blocks = queue_of(5)
    assert [b.block_id for b in queue.after(blocks[2])] == [3, 4]
    assert [b.block_id for b in queue.after(None)] == [0, 1, 2, 3, 4]
    queue.remove(blocks[2])
    assert list(queue.after(blocks[2])) == []
    queue.append(blocks[2])
    assert [b.block_id for b in queue.after(blocks[3])] == [4, 2]


def test_links_are_cleared_when_a_block_leaves_and_removing_it_twice_is_an_error() -> None:
    queue, blocks = queue_of(3)
    [first] = queue.popleft_n(1)
    assert first.prev_free is None and first.next_free is None
    queue.remove(blocks[1])
    assert blocks[1].prev_free is None and blocks[1].next_free is None
    with pytest.raises(IntegrityError, match="not queued"):
        queue.remove(blocks[1])
    assert queue.block_ids() == [2] and queue.num_free_blocks == 1
    queue.check_integrity()


def test_append_n_and_prepend_n_on_an_empty_queue() -> None:
    queue, blocks = queue_of(3)
    taken = queue.popleft_n(3)
    assert queue.block_ids() == [] and len(queue) == 0
    queue.prepend_n([taken[1]])
    queue.append_n([taken[2], taken[0]])
    assert queue.block_ids() == [1, 2, 0]
    queue.check_integrity()


def test_a_new_block_is_free_unhashed_and_unlinked() -> None:
    block = KVCacheBlock(7)
    assert (block.block_id, block.ref_cnt, block.block_hash, block.hash_group_id) == (
        7, 0, None, -1)
    assert block.is_null is False and block.extra_hashes is None
    assert block.prev_free is None and block.next_free is None


def test_a_queue_built_empty_is_consistent_and_takes_blocks() -> None:
    queue = FreeKVCacheBlockQueue([])
    assert queue.block_ids() == [] and len(queue) == 0
    queue.check_integrity()
    queue.append_n([KVCacheBlock(4)])
    assert queue.block_ids() == [4]
    queue.check_integrity()


def test_a_broken_sentinel_link_names_the_sentinel() -> None:
    """The sentinels carry block id -1, so an error about a broken end of the queue says
    which end (and never names a real block)."""
    queue, blocks = queue_of(2)
    blocks[1].next_free = None  # the chain no longer reaches the tail
    with pytest.raises(IntegrityError, match=r"KVCacheBlock\(id=-1.* is not queued"):
        queue.popleft_n(2)
    queue, _ = queue_of(2)
    queue._tail.prev_free = None
    with pytest.raises(IntegrityError, match=r"KVCacheBlock\(id=-1.* is not queued"):
        queue.append_n([KVCacheBlock(9)])
