"""The circular buffer (`impl.core.circular_buffer`): one block per request for its whole
life, beside full attention; no hits, nothing indexed. Exact block ids."""

from __future__ import annotations

import pytest

from impl.core.kv_cache_manager import KVCacheManager
from impl.core.specs import CircularBufferSpec, FullAttentionSpec
from tests.core.helpers import admit, make_manager, make_request
from vtwin.errors import IntegrityError


def _manager() -> KVCacheManager:
    return make_manager(16, FullAttentionSpec(block_size=4), CircularBufferSpec(block_size=4))


def test_a_request_claims_one_ring_block_and_keeps_it() -> None:
    manager = _manager()
    request = make_request("a", range(10))
    assert admit(manager, request, 6) == [[1, 2], [3]]
    assert manager.allocate_slots(request, 4) is not None  # more tokens: no new ring block
    assert [list(ids) for ids in manager.get_block_ids("a")] == [[1, 2, 4], [3]]
    manager.free(request)
    assert manager.block_pool.get_num_free_blocks() == 15


def test_the_ring_takes_no_part_in_prefix_hits_and_indexes_nothing() -> None:
    manager = _manager()
    first = make_request("a", range(10))
    admit(manager, first)
    assert {group for group, _ in manager.block_pool.cached_hashes()} == {0}
    second = make_request("b", range(10))
    assert admit(manager, second) == [[1, 2, 5], [6]]  # full hit of 8; a ring of its own


def test_a_second_ring_block_is_caught() -> None:
    manager = _manager()
    admit(manager, make_request("a", range(10)))
    ring = manager.coordinator.managers[1]
    ring.req_to_blocks["a"].append(ring.req_to_blocks["a"][0])
    with pytest.raises(IntegrityError, match="group 1: a holds 2 ring blocks"):
        ring.check_integrity()


def test_a_held_ring_block_is_not_asked_for_again() -> None:
    """With the pool exhausted, a request whose next tokens fit its blocks still gets them:
    its ring block is held already, so the allocation needs nothing."""
    manager = _manager()
    request = make_request("a", range(10))
    assert admit(manager, request, 6) == [[1, 2], [3]]
    filler = make_request("z", range(500, 544))
    assert admit(manager, filler) is not None  # 11 full blocks + a ring: the pool is empty
    assert manager.block_pool.get_num_free_blocks() == 0
    assert manager.allocate_slots(request, 1) is not None
