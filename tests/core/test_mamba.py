"""Mamba + full attention: exact block ids, and the same-step rule for mamba prefix hits.

Layout used below: full attention and mamba, both with 4-token blocks, 20 blocks (block 0 is
null). A 9-token prompt fills blocks for tokens 0-3, 4-7 and one slot of the third block; the
mamba group keeps only the state after the last computed token, so its first two blocks are
released (cached, free) as soon as the prompt is computed.
"""

from __future__ import annotations

import pytest

from impl.core.kv_cache_manager import KVCacheManager
from impl.core.specs import FullAttentionSpec, MambaSpec
from tests.core.helpers import admit, make_manager, make_request
from vtwin.errors import IntegrityError

PROMPT = list(range(9))


def full_and_mamba(num_blocks: int = 20) -> KVCacheManager:
    return make_manager(num_blocks, FullAttentionSpec(block_size=4), MambaSpec(block_size=4))


def test_mamba_keeps_one_state_and_hits_on_the_last_cached_boundary() -> None:
    manager = full_and_mamba()
    a = make_request("a", PROMPT)
    assert admit(manager, a) == [[1, 2, 3], [4, 5, 6]]
    manager.new_step_starts()
    # The next allocation frees the mamba blocks before the last computed token.
    a.append_output_token_ids(50)
    assert manager.allocate_slots(a, 1) is not None
    a.num_computed_tokens = 10
    assert manager.get_block_ids("a") == ([1, 2, 3], [0, 0, 6])
    b = make_request("b", PROMPT)
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 8 and hits.get_block_ids() == ([1, 2], [0, 5])
    assert admit(manager, b) == [[1, 2, 7], [0, 5, 8]]
    manager.check_integrity()


def test_a_hit_on_a_hash_cached_this_step_is_refused_even_through_an_older_block() -> None:
    """Step 1: `a` computes the prompt and caches its mamba states (blocks 4, 5).
    Step 2: `b` computes the same prompt without reading the cache and caches the same hashes
    again (duplicate entries, blocks 10, 11). A lookup for `c` returns `a`'s older block 5,
    whose state was written a step ago; upstream refuses the hit anyway because its hash was
    cached during this step, so the allocation must fail until the next step starts.
    """
    manager = full_and_mamba()
    a = make_request("a", PROMPT)
    assert admit(manager, a) == [[1, 2, 3], [4, 5, 6]]
    manager.new_step_starts()
    b = make_request("b", PROMPT, skip_reading_prefix_cache=True)
    assert admit(manager, b) == [[7, 8, 9], [10, 11, 12]]
    c = make_request("c", PROMPT)
    hits, num_hit = manager.get_computed_blocks(c)
    assert num_hit == 8 and hits.get_block_ids() == ([1, 2], [0, 5])
    assert manager.allocate_slots(c, 1, num_hit, hits) is None
    assert manager.get_block_ids("c") == ([], [])
    manager.check_integrity()
    manager.new_step_starts()
    hits, num_hit = manager.get_computed_blocks(c)
    assert manager.allocate_slots(c, 1, num_hit, hits) is not None
    assert manager.get_block_ids("c") == ([1, 2, 13], [0, 5, 14])
    manager.check_integrity()


def test_a_running_request_counts_the_blocks_it_holds() -> None:
    """a holds blocks 4, 5, 6 for its 9 tokens; one more token needs no new mamba block."""
    manager = full_and_mamba()
    a = make_request("a", PROMPT)
    assert admit(manager, a) == [[1, 2, 3], [4, 5, 6]]
    manager.new_step_starts()
    mamba = manager.coordinator.managers[1]
    assert mamba.get_num_blocks_to_allocate("a", 10, [], 9, False) == 0
    assert mamba.get_num_blocks_to_allocate("a", 13, [], 9, False) == 1


def test_a_state_cached_this_step_is_refused_even_with_the_whole_pool_free() -> None:
    """The refusal asks for more blocks than the pool has: a's states are keyed this step and
    a is freed again (as a preemption would), so every block is free, and a hit on them still
    cannot be allocated in this step."""
    manager = make_manager(12, MambaSpec(block_size=4))
    a = make_request("a", PROMPT)
    assert admit(manager, a) == [[1, 2, 3]]
    manager.free(a)
    pool = manager.block_pool
    assert pool.get_num_free_blocks() == pool.num_gpu_blocks - 1
    b = make_request("b", PROMPT)
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 8
    mamba = manager.coordinator.managers[0]
    assert mamba.get_num_blocks_to_allocate("b", 9, hits.blocks[0], 8, False) \
        > pool.get_num_free_blocks()
    assert manager.allocate_slots(b, 1, num_hit, hits) is None


def test_integrity_names_a_cached_count_past_the_table() -> None:
    manager = full_and_mamba()
    a = make_request("a", PROMPT)
    admit(manager, a)
    manager.coordinator.managers[1].num_cached_block["a"] = 9
    with pytest.raises(IntegrityError, match=r"group 1: a has 9 cached of 3 blocks"):
        manager.check_integrity()


def test_a_retention_interval_keeps_the_state_ending_each_segment() -> None:
    """Interval 12 tokens (3 blocks of 4): the states of blocks 2, 5, 8 (ending at 12, 24,
    36), and as with interval 0 the one at the replay boundary (31 aligned to 4: 28, block
    6); an interval of one block keeps every state."""
    from impl.core.mamba import MambaManager
    from impl.core.specs import MambaSpec
    from tests.core.helpers import make_manager

    manager = make_manager(16, MambaSpec(block_size=4))
    state = manager.coordinator.managers[0]
    assert isinstance(state, MambaManager)
    state.retention_interval = 12
    assert state.reachable_block_mask(1, 10, (31,)) == [
        False, True, False, False, True, True, False, True, False]
    state.retention_interval = 4
    assert state.reachable_block_mask(1, 10, (31,)) is None
