"""Mamba 'align' + full attention at the KV level: exact block ids, sizing and retirement.

Layout: full attention and mamba ('align'), both with 4-token blocks, block 0 null. Chunks are
given directly here (the scheduler's block-aligned split is tested in tests/sched). A mamba
table holds one real block per allocation, at the chunk's last block, null before it.
"""

from __future__ import annotations

import pytest

from impl.core.kv_cache_manager import KVCacheManager
from impl.core.mamba_align import MambaAlignManager
from impl.core.mamba_boundaries import BoundaryState
from impl.core.specs import FullAttentionSpec, MambaSpec
from impl.sched.request import Request
from tests.core.helpers import admit, make_manager, make_request
from vtwin.errors import IntegrityError


def align_manager(num_blocks: int = 40) -> KVCacheManager:
    return make_manager(num_blocks, FullAttentionSpec(block_size=4),
                        MambaSpec(block_size=4, mamba_cache_mode="align"))


def mamba(manager: KVCacheManager, index: int = 1) -> MambaAlignManager:
    group = manager.coordinator.managers[index]
    assert isinstance(group, MambaAlignManager)
    return group


def run_chunk(manager: KVCacheManager, request: Request, num_new: int) -> list[list[int]]:
    """One step of a running request: allocate `num_new` more tokens, then mark them computed
    (the next step processes them)."""
    manager.new_step_starts()
    blocks = manager.allocate_slots(request, num_new)
    assert blocks is not None
    request.num_computed_tokens += num_new
    manager.check_integrity()
    return [list(ids) for ids in blocks.get_block_ids()]


def test_one_state_block_per_chunk_with_null_gaps_and_retirement() -> None:
    manager = align_manager()
    a = make_request("a", range(20))
    assert admit(manager, a, 8) == [[1, 2], [0, 3]]
    # 8 more tokens: full gets 2 blocks; mamba pads one null and takes one block (the new
    # ones reported include the null); block 3 (state at 8) is still read by this chunk.
    assert run_chunk(manager, a, 8) == [[4, 5], [0, 6]]
    assert manager.get_block_ids("a") == ([1, 2, 4, 5], [0, 3, 0, 6])
    # The next chunk processes past 16: everything left of block 3 of the table is retired.
    assert run_chunk(manager, a, 4) == [[7], [8]]
    assert manager.get_block_ids("a") == ([1, 2, 4, 5, 7], [0, 0, 0, 6, 8])
    assert mamba(manager).num_retired_blocks["a"] == 3
    manager.free(a)
    assert "a" not in mamba(manager).num_retired_blocks
    manager.check_integrity()


def test_sizing_asks_for_one_state_block_whatever_the_chunk() -> None:
    """40 blocks: a 100-token chunk needs 25 full-attention blocks but one mamba block, so
    27 free blocks (26 + the null) are enough, and 26 free are not."""
    manager = align_manager(num_blocks=27)
    assert manager.block_pool.get_num_free_blocks() == 26
    a = make_request("a", range(100))
    assert admit(manager, a, 100) is not None
    assert manager.get_block_ids("a")[1] == [0] * 24 + [26]
    manager = align_manager(num_blocks=26)
    assert admit(manager, make_request("b", range(100)), 100) is None


def test_a_table_already_long_enough_gets_nothing_new() -> None:
    manager = align_manager()
    a = make_request("a", range(20))
    assert admit(manager, a, 6) == [[1, 2], [0, 3]]
    # 2 more tokens stay inside block 1: nothing new for either group.
    assert run_chunk(manager, a, 2) == [[], []]
    assert mamba(manager).get_num_blocks_to_allocate("a", 8, [], 8, False) == 0
    assert mamba(manager).get_num_blocks_to_allocate("a", 4, [], 4, False) == -1


def test_a_hit_takes_the_state_at_the_hit_and_the_free_copy_counts() -> None:
    manager = align_manager()
    a = make_request("a", range(13))
    assert admit(manager, a, 8) == [[1, 2], [0, 3]]
    assert run_chunk(manager, a, 5) == [[4, 5], [0, 6]]
    manager.free(a)
    # b shares 12 tokens: full attention hits all 12 (blocks 1, 2, 4), mamba has a state only
    # at 8 (block 3), so the hit is 8 and the junction (where a state is missing) is 12.
    b = make_request("b", [*range(12), 99])
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 8 and hits.get_block_ids() == ([1, 2], [0, 3])
    assert b.shared_prefix_boundary == 12
    # Free cached hit blocks count as allocations: full 2 hits + 2 new, mamba 1 hit + 1 new.
    coordinator = manager.coordinator
    assert coordinator.get_num_blocks_to_allocate("b", 13, hits.blocks, 8) == 4 + 2
    # New blocks come from the queue's front, where a's unhashed blocks went when it was
    # freed tail first: 6 (its last state, at 13 tokens) and 5 (its partial full block).
    assert admit(manager, b, 4) == [[1, 2, 6], [0, 3, 5]]


def test_lookahead_slots_go_to_full_attention_only() -> None:
    manager = align_manager()
    a = make_request("a", range(20))
    assert admit(manager, a, 8, lookahead=4) == [[1, 2, 3], [0, 4]]


@pytest.mark.parametrize("prompt_len", [9, 10, 11])
def test_the_0_32_remark_of_the_prompt_boundary_state(prompt_len: int) -> None:
    """a (9 to 11 tokens: the last block boundary before its final token is 8 for each)
    computes 8, then the rest: the second cache call lands on that boundary again. With the
    0.32 re-mark, a hit on that state is refused in that step."""
    for remarks in (True, False):
        manager = align_manager()
        mamba(manager).remarks_prompt_boundary = remarks
        a = make_request("a", range(prompt_len))
        assert admit(manager, a, 8) == [[1, 2], [0, 3]]
        run_chunk(manager, a, prompt_len - 8)
        b = make_request("b", range(prompt_len))
        hits, num_hit = manager.get_computed_blocks(b)
        assert num_hit == 8
        blocks = manager.allocate_slots(b, 2, num_hit, hits)
        assert (blocks is None) == remarks


def test_integrity_names_a_retired_block_that_is_not_null() -> None:
    manager = align_manager()
    a = make_request("a", range(20))
    admit(manager, a, 8)
    mamba(manager).num_retired_blocks["a"] = 2
    with pytest.raises(IntegrityError, match=r"group 1: a retired 2 blocks that are not all"):
        manager.check_integrity()


def test_a_manager_built_alone_follows_the_default_release() -> None:
    """Outside a scheduler (which sets it from its `Behaviour`) the manager re-marks, as the
    default release, 0.32, does."""
    assert mamba(align_manager()).remarks_prompt_boundary is True


def test_a_hit_on_a_state_still_in_use_is_not_counted_as_an_allocation() -> None:
    """a holds its state at 8 (block 3: the next chunk starts from it); b hits it in a later
    step. Only a free cached hit costs an allocation, so b needs just its one new state."""
    manager = align_manager()
    a = make_request("a", range(13))
    assert admit(manager, a, 8) == [[1, 2], [0, 3]]
    manager.new_step_starts()
    b = make_request("b", [*range(8), 50, 51, 52])
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 8 and hits.get_block_ids() == ([1, 2], [0, 3])
    assert manager.block_pool.blocks[3].ref_cnt == 1
    assert mamba(manager).get_num_blocks_to_allocate("b", 11, hits.blocks[1], 8, False) == 1


def test_a_state_cached_this_step_is_refused_even_with_the_whole_pool_free() -> None:
    """The refusal asks for more blocks than the pool has: a's state at 8 is keyed this step
    and a is freed again (as a preemption would), every block is free, and a hit on that
    state still cannot be allocated in this step."""
    manager = make_manager(12, MambaSpec(block_size=4, mamba_cache_mode="align"))
    group = mamba(manager, index=0)
    a = make_request("a", range(13))
    assert admit(manager, a, 8) == [[0, 1]]
    manager.free(a)
    pool = manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1
    b = make_request("b", range(13))
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 8
    assert group.get_num_blocks_to_allocate("b", 13, hits.blocks[0], 8, False) \
        > pool.get_num_free_blocks()
    assert manager.allocate_slots(b, 5, num_hit, hits) is None


def test_integrity_names_a_cached_count_past_the_table() -> None:
    manager = align_manager()
    a = make_request("a", range(20))
    admit(manager, a, 8)
    mamba(manager).num_cached_block["a"] = 9
    with pytest.raises(IntegrityError, match=r"group 1: a has 9 cached of 2 blocks"):
        manager.check_integrity()


def test_integrity_names_retired_blocks_of_a_request_without_a_table() -> None:
    manager = align_manager()
    mamba(manager).num_retired_blocks["ghost"] = 1
    with pytest.raises(IntegrityError, match=r"group 1: ghost retired 1 blocks"):
        manager.check_integrity()


def test_no_hit_in_any_group_leaves_no_junction() -> None:
    """The junction is the longest single-group hit when it beats the agreed hit; with nothing
    cached anywhere it is 0, and a full hit of both groups has none either."""
    manager = align_manager()
    a = make_request("a", range(13))
    manager.get_computed_blocks(a)
    assert a.shared_prefix_boundary == 0
    assert admit(manager, a, 8) == [[1, 2], [0, 3]]
    manager.new_step_starts()
    b = make_request("b", range(13))
    _, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 8 and b.shared_prefix_boundary == 0


def test_drafts_state_blocks_follow_the_state_to_the_end_of_the_table() -> None:
    """Two draft tokens (`num_speculative_blocks` 2), 4-token blocks. Admitted with 8 tokens:
    the state's block and both drafts' blocks at once (after one null). The next chunk (to 16)
    moves the state on to index 3: the draft block it passes (index 2) moves to the end, the
    other becomes the state's, one new block closes the table, and the previous state (index
    1) is remembered. Processing past 16 frees it; the chunk to 20 then needs one block."""
    manager = make_manager(40, FullAttentionSpec(block_size=4),
                           MambaSpec(block_size=4, mamba_cache_mode="align",
                                     num_speculative_blocks=2))
    a = make_request("a", range(40))
    assert manager.coordinator.get_num_blocks_to_allocate(
        "a", 8, ([], []), 0, num_tokens_main=8) == 2 + 3
    assert admit(manager, a, 8) == [[1, 2], [0, 3, 4, 5]]
    assert run_chunk(manager, a, 8) == [[6, 7], [4, 8]]
    assert manager.get_block_ids("a") == ([1, 2, 6, 7], [0, 3, 0, 5, 4, 8])
    assert mamba(manager).last_state_block_idx["a"] == 1
    assert run_chunk(manager, a, 4) == [[9], [10]]
    assert manager.get_block_ids("a") == ([1, 2, 6, 7, 9], [0, 0, 0, 5, 4, 8, 10])
    assert mamba(manager).last_state_block_idx["a"] == 3
    manager.free(a)
    assert "a" not in mamba(manager).last_state_block_idx
    manager.check_integrity()


def test_keyed_states_are_offered_by_block_with_their_boundary_until_the_request_frees() -> None:
    """With a KV connector the scheduler takes, each step, the states the cache keyed: the
    block (not its table position: the table nulls and retires entries) and the token count
    it ends. Offers a request has not had taken go when it frees its blocks."""
    manager = align_manager()
    mamba(manager).offers_boundary_states = True
    a = make_request("a", range(20))
    admit(manager, a, 8)
    assert manager.take_boundary_states() == [BoundaryState("a", 1, 3, 8)]
    assert manager.take_boundary_states() == []
    assert run_chunk(manager, a, 8) == [[4, 5], [0, 6]]
    b = make_request("b", range(100, 120))
    admit(manager, b, 4)
    manager.free(a)
    assert manager.take_boundary_states() == [BoundaryState("b", 1, 8, 4)]


def test_a_state_is_offered_once_though_it_stays_in_the_table() -> None:
    """The state at 8 (block 3) is still in a's table when the next chunk's cache call keys
    the state at 16: only the new state is offered then, not block 3 again."""
    manager = align_manager()
    mamba(manager).offers_boundary_states = True
    a = make_request("a", range(20))
    admit(manager, a, 8)
    assert manager.take_boundary_states() == [BoundaryState("a", 1, 3, 8)]
    assert run_chunk(manager, a, 8) == [[4, 5], [0, 6]]
    assert manager.get_block_ids("a")[1] == [0, 3, 0, 6]  # block 3 is still there
    assert manager.take_boundary_states() == [BoundaryState("a", 1, 6, 16)]


def test_no_offers_are_kept_without_a_connector() -> None:
    manager = align_manager()
    a = make_request("a", range(20))
    admit(manager, a, 8)
    assert manager.take_boundary_states() == []
