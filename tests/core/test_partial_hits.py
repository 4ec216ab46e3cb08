"""Sub-block hits with copy-on-write at the KV level (`impl.core.partial_hits`): exact block ids.

Layout: full attention and mamba ('align'), 8-token blocks, hashes every 2 tokens, block 0
null. A 21-token prompt's last hash boundary before its final token is 20, inside block 2.
The helpers drain the step's copies the way the scheduler does once its output carries them.
"""

from __future__ import annotations

from impl.core.block_pool import BlockPool
from impl.core.kv_cache_manager import KVCacheManager
from impl.core.mamba_align import MambaAlignManager
from impl.core.partial_hits import full_attention_hit
from impl.core.specs import FullAttentionSpec, MambaSpec, SlidingWindowSpec
from impl.sched.request import Request
from tests.core.helpers import make_manager, make_request


def sub_block_manager(*extra: SlidingWindowSpec, num_blocks: int = 30) -> KVCacheManager:
    return make_manager(num_blocks, FullAttentionSpec(block_size=8), *extra,
                        MambaSpec(block_size=8, mamba_cache_mode="align"), hash_block_size=2)


def request(request_id: str, tokens: list[int]) -> Request:
    return make_request(request_id, tokens, block_size=2)  # hashed every 2 tokens


def drain(manager: KVCacheManager) -> list[tuple[int, int]]:
    """The step's (source, copy) ids; their extra references dropped, as after the output."""
    pairs = manager.take_block_copies()
    manager.block_pool.free_blocks([block for pair in pairs for block in pair])
    manager.check_integrity()
    return [(source.block_id, copy.block_id) for source, copy in pairs]


def step(manager: KVCacheManager, req: Request, num_new: int, hit: bool = False) -> None:
    manager.new_step_starts()
    if hit:
        hits, num_hit = manager.get_computed_blocks(req)
        assert manager.allocate_slots(req, num_new, num_hit, hits) is not None
        req.num_computed_tokens = num_hit
    else:
        assert manager.allocate_slots(req, num_new) is not None
    manager.check_integrity()  # the pending copies' references count as holders
    req.num_computed_tokens += num_new


def mamba(manager: KVCacheManager) -> MambaAlignManager:
    group = manager.coordinator.managers[-1]
    assert isinstance(group, MambaAlignManager)
    return group


def producer(manager: KVCacheManager) -> Request:
    """Request a (21-token prompt) computed in chunks 16, 4 (ending on the tail boundary, as
    the scheduler's split makes it) and 1."""
    a = request("a", list(range(21)))
    step(manager, a, 16)
    assert drain(manager) == []
    step(manager, a, 4)
    # Full attention keys block 4 (tokens 16-23) under the hash at 20; mamba keys its state
    # block 5 there and remembers that its next step overwrites it.
    assert manager.get_block_ids("a") == ([1, 2, 4], [0, 3, 5])
    assert mamba(manager).partial_hit_reqs["a"][0] == 2
    assert mamba(manager).num_cached_block["a"] == 2
    assert drain(manager) == []
    # One token more: mamba's sizing asks for the copy, the allocation moves the cache entry
    # to it (block 6) and the request keeps writing its own block 5.
    assert mamba(manager).get_num_blocks_to_allocate("a", 21, [], 20, False) == 1
    step(manager, a, 1)
    assert manager.get_block_ids("a") == ([1, 2, 4], [0, 0, 5])
    assert drain(manager) == [(5, 6)]
    assert manager.block_pool.blocks[6].ref_cnt == 0  # cached, free: nobody holds the copy
    assert manager.block_pool.blocks[6].block_hash == a.block_hashes[9]
    assert manager.block_pool.blocks[5].block_hash is None
    return a


def test_sub_block_hits_are_on_for_full_attention_and_mamba_align() -> None:
    manager = sub_block_manager()
    assert manager.coordinator.sub_block_hits
    assert manager.coordinator.cache_hit_alignment == 2
    # A sliding window with blocks wider than the hash cannot look such hits up: off.
    assert not sub_block_manager(SlidingWindowSpec(block_size=8, sliding_window=8)
                                 ).coordinator.sub_block_hits


def test_a_running_request_copies_its_prompt_tail_state_before_overwriting_it() -> None:
    producer(sub_block_manager())


def test_a_hit_inside_a_block_takes_private_copies_of_the_shared_blocks() -> None:
    manager = sub_block_manager()
    producer(manager)
    b = request("b", [*range(20), 99, 98])
    manager.new_step_starts()
    hits, num_hit = manager.get_computed_blocks(b)
    # 20 tokens: full attention's two full blocks and block 4 through its entry at 20; the
    # mamba state at 20 is a's copy.
    assert num_hit == 20
    assert hits.get_block_ids() == ([1, 2, 4], [0, 0, 6])
    # Each group needs one block more for its copy (mamba: the copy only, its chunk ends in
    # the hit's block); block 6 sits free in the queue, so touching it counts too.
    full, state = manager.coordinator.managers
    assert full.get_num_blocks_to_allocate("b", 22, hits.blocks[0], 20, False) == 1
    assert state.get_num_blocks_to_allocate("b", 22, hits.blocks[1], 20, False) == 2
    assert manager.allocate_slots(b, 2, num_hit, hits) is not None
    manager.check_integrity()
    assert manager.get_block_ids("b") == ([1, 2, 7], [0, 0, 8])
    assert drain(manager) == [(4, 7), (6, 8)]
    # a still holds block 4; a's copy of its state went back to the queue, still cached.
    assert manager.block_pool.blocks[4].ref_cnt == 1
    assert manager.block_pool.blocks[6].ref_cnt == 0
    # b's private copies are cached again once full: not before.
    assert full.num_cached_block["b"] == 2


def test_a_hit_on_a_block_boundary_needs_no_copy() -> None:
    manager = sub_block_manager()
    producer(manager)
    c = request("c", [*range(16), 50, 51, 52])
    step(manager, c, 3, hit=True)
    assert c.num_computed_tokens == 19  # hit 16 (block boundary) + 3
    assert manager.get_block_ids("c") == ([1, 2, 7], [0, 3, 8])
    assert drain(manager) == []


def test_freeing_a_request_forgets_its_pending_partial_hit() -> None:
    manager = sub_block_manager()
    a = request("a", list(range(21)))
    step(manager, a, 16)
    step(manager, a, 4)
    assert "a" in mamba(manager).partial_hit_reqs
    manager.free(a)
    assert "a" not in mamba(manager).partial_hit_reqs
    assert "a" not in mamba(manager).allocated
    manager.check_integrity()


def test_with_hits_off_nothing_is_keyed_inside_a_block() -> None:
    """Full + window + mamba: the window cannot look up sub-block hits, so hits and caching
    stay on the block grid (upstream rounds the cached length down to it): the prompt-tail
    state at 20 is never keyed, and nothing is copied."""
    manager = sub_block_manager(SlidingWindowSpec(block_size=8, sliding_window=8))
    a = request("a", list(range(21)))
    step(manager, a, 16)
    step(manager, a, 4)
    assert "a" not in mamba(manager).partial_hit_reqs
    step(manager, a, 1)
    assert drain(manager) == []


def test_a_prompt_tail_in_the_first_block_is_copied_out_of_the_running_table() -> None:
    """A 7-token prompt: its tail boundary (6) lies in block 0, so nothing is retired before
    the copy; the request still keeps its own state block and the copy takes the entry."""
    manager = sub_block_manager()
    a = request("a", list(range(7)))
    step(manager, a, 6)
    assert manager.get_block_ids("a") == ([1], [2])
    step(manager, a, 1)
    assert manager.get_block_ids("a") == ([1], [2])
    assert drain(manager) == [(2, 3)]
    assert manager.block_pool.blocks[3].block_hash == a.block_hashes[2]


def test_the_longest_boundary_inside_the_block_wins() -> None:
    """Two prompt-tail entries under one prefix: a's at 18 and b's at 20 (b extends a's first
    18 tokens and hit them). c extends b's first 20: full attention probes the boundaries
    inside block 2 from the right, so c hits b's block at 20, not a's at 18."""
    manager = sub_block_manager(num_blocks=40)
    a = request("a", list(range(19)))
    step(manager, a, 16)
    step(manager, a, 2)  # ends on a's tail boundary (18)
    step(manager, a, 1)
    drain(manager)
    b = request("b", [*range(18), 50, 51, 52])
    step(manager, b, 2, hit=True)  # hit 18, then up to b's tail boundary (20)
    assert b.num_computed_tokens == 20
    drain(manager)
    step(manager, b, 1)
    drain(manager)
    c = request("c", [*range(18), 50, 51, 60, 61])
    manager.new_step_starts()
    hits, num_hit = manager.get_computed_blocks(c)
    assert num_hit == 20
    assert hits.get_block_ids()[0][2] == manager.get_block_ids("b")[0][2]


def test_a_hit_never_covers_the_whole_prompt() -> None:
    """b is a's first 20 tokens, and a keyed block 2 at 20 (its tail boundary): b may hit at
    most 19 tokens, so the probe stops below 20 and b hits a's 16 full tokens only."""
    manager = sub_block_manager()
    a = request("a", list(range(22)))
    step(manager, a, 16)
    step(manager, a, 4)
    step(manager, a, 2)
    drain(manager)
    b = request("b", list(range(20)))
    manager.new_step_starts()
    _, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 16


def _pool_with(entries: dict[int, int]) -> tuple[BlockPool, list[bytes]]:
    """A pool whose blocks are findable under fine hashes: `entries[fine] = block id`, with
    block size 8 and hashes every 2 tokens (ratio 4; block b's full key is entry 4b + 3)."""
    pool = BlockPool(12, enable_caching=True, enable_kv_cache_events=False)
    blocks = {b.block_id: b for b in pool.get_new_blocks(8)}
    hashes = [bytes([fine]) * 4 for fine in range(16)]
    for fine, block_id in entries.items():
        pool.cache_partial_block(blocks[block_id], hashes[fine], 0, 2 * (fine + 1))
    return pool, hashes


def test_a_hit_stops_at_an_evicted_block_even_with_a_later_tail_cached() -> None:
    """Blocks 0 and 1 cached, block 2 evicted (its key gone), a prompt tail's entry inside
    block 3 still cached: the hit is blocks 0-1 (16 tokens) and nothing past the hole, since
    only the block right after the run may hold the hit's partial end."""
    pool, hashes = _pool_with({3: 1, 7: 2, 13: 4})
    hits, length = full_attention_hit(hashes, 64, [0], pool, 8, 2)
    assert ([b.block_id for b in hits[0]], length) == ([1, 2], 16)
    # A tail entry at the first boundary of block 3 (fine 12): still past the hole.
    pool, hashes = _pool_with({3: 1, 7: 2, 12: 4})
    hits, length = full_attention_hit(hashes, 64, [0], pool, 8, 2)
    assert ([b.block_id for b in hits[0]], length) == ([1, 2], 16)


def test_a_partial_end_inside_the_next_block_sets_the_length_exactly() -> None:
    """Block 0 cached, a tail entry at fine index 5 (12 tokens) inside block 1: 12 tokens,
    one of the two blocks partial."""
    pool, hashes = _pool_with({3: 1, 5: 3})
    hits, length = full_attention_hit(hashes, 64, [0], pool, 8, 2)
    assert ([b.block_id for b in hits[0]], length) == ([1, 3], 12)
    # capped below the tail: the probe starts under max_length
    hits, length = full_attention_hit(hashes, 11, [0], pool, 8, 2)
    assert ([b.block_id for b in hits[0]], length) == ([1], 8)
