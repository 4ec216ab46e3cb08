"""The cache-hit searches of the types that keep only part of a sequence, block by block, with
exact blocks and lengths as vLLM's own tests do. Sliding window: a hit needs the window's
blocks just before its end (cdiv(window - 1, block) of them), found scanning from the right,
past holes; only a run from block 0 may be shorter. Chunked local: the blocks of the last
chunk. Mamba: the latest cached state at an aligned end."""

from __future__ import annotations

import pytest

from impl.core.block_pool import BlockPool
from impl.core.sliding_window import SlidingWindowManager
from impl.core.specs import SlidingWindowSpec

H = [bytes([i]) * 8 for i in range(8)]  # block hashes of a 7-block prompt


def search(cached: set[int], window: int, num_blocks: int, alignment: int = 4,
           drop_eagle_block: bool = False) -> tuple[list[int], int]:
    """Cache blocks `cached` (by position) of a request, then search its first `num_blocks`
    hashes; returns the hit's block ids per position (0: the null block) and its length."""
    pool = BlockPool(16, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(len(H))
    for index in sorted(cached):
        pool.cache_full_blocks([blocks[index]], [H[index]], 0, 1, 0, block_size=4)
    pool.free_blocks(blocks)  # cached blocks stay findable while free
    spec = SlidingWindowSpec(block_size=4, sliding_window=window)
    hits, length = SlidingWindowManager.find_longest_cache_hit(
        H[:num_blocks], num_blocks * 4, [0], pool, spec, alignment, drop_eagle_block)
    ids = [0 if b.is_null else H.index(b.block_hash) + 100 for b in hits[0]]
    return ids, length


def test_a_full_run_hits_everything_keeping_only_the_window() -> None:
    # window 9: a hit at 24 needs tokens 16-23, blocks 4 and 5
    assert search(set(range(6)), 9, 6) == ([0, 0, 0, 0, 104, 105], 24)


def test_a_hole_at_the_end_is_skipped() -> None:
    assert search({0, 1, 2, 3, 4}, 9, 6) == ([0, 0, 0, 103, 104], 20)


def test_a_hole_in_the_middle_restarts_the_run() -> None:
    # block 4 alone is too short for the window; 1-2 is the longest window-sized run
    assert search({0, 1, 2, 4}, 9, 5) == ([0, 101, 102], 12)


def test_a_short_run_from_block_zero_is_a_hit() -> None:
    assert search({0, 2}, 9, 3) == ([100], 4)


def test_a_window_one_token_past_a_block_needs_two_blocks() -> None:
    # window 6: cdiv(5, 4) = 2 blocks; block 2 alone does not make a hit at 12
    assert search({0, 2}, 6, 3) == ([100], 4)
    assert search({1, 2}, 6, 3) == ([0, 101, 102], 12)


@pytest.mark.parametrize(("cached", "expected"), [
    ({0, 1, 2, 3, 4, 5}, ([0, 0, 0, 0, 104, 105], 24)),
    # block 4 would end a run at 20 tokens, not a multiple of 8: a run may not end there, so
    # the search goes on left and the run 2-3 ends at 16 (blocks 0 and 1 are not taken; the
    # twin once kept the whole run from block 0, same length, other blocks touched)
    ({0, 1, 2, 3, 4}, ([0, 0, 102, 103], 16)),
    ({0}, ([], 0)),                               # a 4-token run from 0 aligns down to 0
])
def test_hits_end_on_the_alignment(cached: set[int], expected: tuple[list[int], int]) -> None:
    """In a hybrid the hit must end on the scheduler block size (here 8 tokens, 2 blocks)."""
    assert search(cached, 9, 6, alignment=8) == expected


def test_a_hit_ends_on_the_alignment_counted_from_the_start() -> None:
    """Alignment of 3 blocks (block sizes 4 and 12): blocks 4 and 3 cannot end a run (20 and
    16 tokens), block 2 can (12): the run 1-2 is the hit."""
    assert search({0, 1, 2, 3, 4}, 9, 5, alignment=12) == ([0, 101, 102], 12)


@pytest.mark.parametrize(("cached", "window", "num_blocks", "alignment", "expected"), [
    # one more block in the run (3), whose last block is then given back
    ({0, 1, 2, 3, 4, 5}, 9, 6, 4, ([0, 0, 0, 103, 104], 20)),
    ({0, 1, 2, 3, 4, 5}, 9, 7, 4, ([0, 0, 0, 103, 104], 20)),  # block 6 missing
    # the run may end where the hit lands aligned after the drop: 20 - 4 = 16
    ({0, 1, 2, 3, 4}, 9, 6, 8, ([0, 0, 102, 103], 16)),
    ({0, 2}, 9, 3, 4, ([], 0)),  # the one-block run from 0 gives its block back
    ({1, 2, 3}, 6, 4, 4, ([0, 101, 102], 12)),
])
def test_an_eagle_hit_gives_up_its_last_block(cached: set[int], window: int, num_blocks: int,
                                              alignment: int,
                                              expected: tuple[list[int], int]) -> None:
    """EAGLE (`drop_eagle_block`): the answers of vLLM 0.32.0's and 0.33.0's own search on the
    same pool (probed), blocks and lengths."""
    assert search(cached, window, num_blocks, alignment, drop_eagle_block=True) == expected


def chunked_search(cached: set[int], max_length: int, alignment: int = 4, chunk: int = 8
                   ) -> tuple[list[int], int]:
    """Chunked local attention, chunks of `chunk` tokens (8: 2 blocks of 4): a hit needs only
    the blocks of the chunk it ends in, from the chunk's start."""
    from impl.core.chunked_local import ChunkedLocalAttentionManager
    from impl.core.specs import ChunkedLocalAttentionSpec

    pool = BlockPool(16, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(len(H))
    for index in sorted(cached):
        pool.cache_full_blocks([blocks[index]], [H[index]], 0, 1, 0, block_size=4)
    pool.free_blocks(blocks)
    spec = ChunkedLocalAttentionSpec(block_size=4, attention_chunk_size=chunk)
    hits, length = ChunkedLocalAttentionManager.find_longest_cache_hit(
        H, max_length, [0], pool, spec, alignment)
    return [0 if b.is_null else H.index(b.block_hash) + 100 for b in hits[0]], length


def test_chunked_hits_need_only_the_last_chunk() -> None:
    assert chunked_search({4, 5}, 20) == ([0, 0, 0, 0, 104], 20)
    assert chunked_search({5}, 20) == ([0, 0, 0, 0], 16)  # the chunk's first block is missing
    assert chunked_search({4, 5}, 20, alignment=8) == ([0, 0, 0, 0], 16)


def test_a_chunked_hit_stops_at_a_hole_inside_the_chunk() -> None:
    """Chunks of 16 tokens (4 blocks): the last chunk of a 28-token search starts at block 4.
    Block 5 was evicted from the middle of the chunk's cached run: the hit ends at the hole,
    and block 6 (cached, past the hole) is not taken at position 5."""
    assert chunked_search({4, 5, 6}, 28, chunk=16) == ([0, 0, 0, 0, 104, 105, 106], 28)
    assert chunked_search({4, 6}, 28, chunk=16) == ([0, 0, 0, 0, 104], 20)
    assert chunked_search({6}, 28, chunk=16) == ([0, 0, 0, 0], 16)


def mamba_search(cached: set[int], num_blocks: int, alignment: int = 4) -> tuple[list[int], int]:
    """Mamba: one state per request, cached at block ends; a hit is the latest cached state
    whose end is aligned, the positions before it null."""
    from impl.core.mamba import MambaManager
    from impl.core.specs import MambaSpec

    pool = BlockPool(16, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(len(H))
    for index in sorted(cached):
        pool.cache_full_blocks([blocks[index]], [H[index]], 0, 1, 0, block_size=4)
    pool.free_blocks(blocks)
    hits, length = MambaManager.find_longest_cache_hit(
        H[:num_blocks], num_blocks * 4, [0], pool, MambaSpec(block_size=4), alignment)
    return [0 if b.is_null else H.index(b.block_hash) + 100 for b in hits[0]], length


def test_mamba_hits_the_latest_aligned_cached_state() -> None:
    assert mamba_search({1, 2}, 5) == ([0, 0, 102], 12)  # the latest state, alone
    assert mamba_search({0, 3}, 5) == ([0, 0, 0, 103], 16)  # skipping a miss on the way
    assert mamba_search({0, 2}, 5, alignment=8) == ([], 0)  # 12 and 4 are not multiples of 8
    assert mamba_search({1, 2}, 5, alignment=8) == ([0, 101], 8)
    assert mamba_search({0}, 5) == ([100], 4)
    assert mamba_search({2}, 5, alignment=12) == ([0, 0, 102], 12)  # ends counted from 0


def test_full_attention_hits_are_cut_to_the_alignment() -> None:
    from impl.core.full_attention import FullAttentionManager
    from impl.core.specs import FullAttentionSpec

    pool = BlockPool(16, enable_caching=True, enable_kv_cache_events=False)
    blocks = pool.get_new_blocks(len(H))
    pool.cache_full_blocks(blocks[:3], H, 0, 3, 0, block_size=4)
    spec = FullAttentionSpec(block_size=4)
    for alignment, length in ((4, 12), (8, 8), (12, 12)):
        hits, found = FullAttentionManager.find_longest_cache_hit(H, 28, [0], pool, spec,
                                                                  alignment)
        assert (len(hits[0]), found) == (length // 4, length)


def test_window_blocks_needed_and_the_sparse_retention_mask() -> None:
    """A window of 6 tokens needs cdiv(5, 4) = 2 blocks before a hit; with sparse retention
    only blocks that some aligned boundary (every 3 blocks) needs are worth caching."""
    from tests.core.helpers import make_manager

    manager = make_manager(10, SlidingWindowSpec(block_size=4, sliding_window=6))
    window = manager.coordinator.managers[0]
    assert isinstance(window, SlidingWindowManager)
    assert window.blocks_needed_for_hit() == 2
    window.retention_interval = None  # dense: a tail before every aligned boundary
    window.cache_hit_alignment = 12
    # block i is kept iff a boundary at a multiple of 3 blocks lies in (i, i + 2]
    assert window.reachable_block_mask(2, 6, (39,)) == [True, False, True, True]


def test_a_retention_interval_keeps_segment_tails_and_the_reachable_ones() -> None:
    """Interval 24 tokens (6 blocks of 4): the 2 blocks before each segment end (4-5, 10-11),
    and as with interval 0 the 2 before the replay boundary (39 aligned to 12: 36, block 9)."""
    from tests.core.helpers import make_manager

    manager = make_manager(16, SlidingWindowSpec(block_size=4, sliding_window=6))
    window = manager.coordinator.managers[0]
    assert isinstance(window, SlidingWindowManager)
    window.retention_interval = 24
    window.cache_hit_alignment = 12
    assert window.reachable_block_mask(2, 12, (39,)) == [
        False, False, True, True, False, True, True, False, True, True]
    # A segment no longer than the window's run: every block is kept.
    window.retention_interval = 8
    assert window.reachable_block_mask(2, 12, (39,)) is None


def test_sparse_retention_keeps_only_the_tail_before_the_replay_boundary() -> None:
    """Retention interval 0 (the engine's default): a request resending its prompt hits at
    most num_prompt_tokens - 1 tokens, aligned down; only the `needed` blocks before that
    boundary are worth caching. Hit alignment 12 over 4-token blocks: 47 tokens replay to 36
    (block 9), so the window's two blocks before it are 7 and 8."""
    from tests.core.helpers import make_manager

    manager = make_manager(10, SlidingWindowSpec(block_size=4, sliding_window=6))
    window = manager.coordinator.managers[0]
    assert isinstance(window, SlidingWindowManager)
    window.retention_interval = 0
    window.cache_hit_alignment = 12
    assert window.reachable_block_mask(5, 11, (46,)) == [False, False, True, True, False, False]
    # aligned to the block alone, 47 tokens replay to 44 (block 11): blocks 9 and 10
    window.cache_hit_alignment = 4
    assert window.reachable_block_mask(8, 13, (46,)) == [False, True, True, False, False]


def test_sparse_retention_also_keeps_the_tail_before_a_shared_prefix_junction() -> None:
    """A request that shares 26 tokens with a cached one (its lookup's junction) is where a
    later request sharing that prefix stops: the window's two blocks before 24 (aligned down
    to 12) are kept too, beside the replay's two before 36."""
    from tests.core.helpers import make_manager

    manager = make_manager(10, SlidingWindowSpec(block_size=4, sliding_window=6))
    window = manager.coordinator.managers[0]
    assert isinstance(window, SlidingWindowManager)
    window.retention_interval = 0
    window.cache_hit_alignment = 12
    assert window.reachable_block_mask(3, 11, (46, 26)) == [
        False, True, True, False, True, True, False, False]


def test_a_hybrid_hit_shortened_by_a_later_group_is_searched_again() -> None:
    """Full attention, a sliding window of 8 tokens and mamba ('all'), blocks of 4, a 25-token
    prompt (a hit of at most 24). Full attention has every block cached, the window only blocks
    4 and 5, mamba a state only at block 3. Mamba cuts the hit to 16 tokens, where the window
    would need blocks 2 and 3: searched again at 16 it has none, so there is no hit at all. (Cut
    to 16 without a second search, the window's blocks would all be null: a hit of 16 tokens
    with nothing in the window.)"""
    from impl.core.specs import FullAttentionSpec, MambaSpec
    from tests.core.helpers import make_manager, make_request

    manager = make_manager(64, FullAttentionSpec(block_size=4),
                           SlidingWindowSpec(block_size=4, sliding_window=8),
                           MambaSpec(block_size=4, mamba_cache_mode="all"))
    request = make_request("r", range(100, 125))
    hashes = request.block_hashes
    pool = manager.block_pool
    for group, positions in ((0, range(6)), (1, (4, 5)), (2, (3,))):
        for position in positions:
            (block,) = pool.get_new_blocks(1)
            pool.cache_full_blocks([block], [hashes[position]], 0, 1, group, block_size=4)
            pool.free_blocks([block])
    hits, length = manager.coordinator.find_longest_cache_hit(request, 24)
    assert length == 0 and all(len(group_hits) == 0 for group_hits in hits)
    pool.check_integrity({})


@pytest.mark.parametrize(("full_block", "window_block", "window", "expected"), [
    # window 32: 2 blocks + the EAGLE one; full attention drops 96 -> 80, the window looks
    # one of its blocks past 80 (to 96) and lands back at 80
    (16, 16, 32, ((1, 2, 3, 4, 5), (0, 0, 0, 11, 12), 80)),
    # full blocks of 32: full drops to 64; the window (blocks of 16) looks to 80, needs a run
    # ending at 80 whose drop lands on 64: blocks 3-4 (one for the window, one given back)
    (32, 16, 16, ((1, 2), (0, 0, 0, 8), 64)),
])
def test_a_hybrid_eagle_hit_lets_each_type_look_one_block_past(
        full_block: int, window_block: int, window: int,
        expected: tuple[tuple[int, ...], tuple[int, ...], int]) -> None:
    """A 100-token prompt cached whole, then resent: vLLM 0.32.0's answers (probed with its
    KVCacheManager, `use_eagle=True`)."""
    from impl.core.kv_cache_manager import KVCacheManager
    from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from tests.core.helpers import make_request

    groups = (KVCacheGroupSpec(("f",), FullAttentionSpec(block_size=full_block)),
              KVCacheGroupSpec(("w",), SlidingWindowSpec(block_size=window_block,
                                                         sliding_window=window)))
    manager = KVCacheManager(KVCacheConfig(40, groups), max_model_len=1024, enable_caching=True,
                             log_stats=False, enable_kv_cache_events=False, use_eagle=True)
    size = min(full_block, window_block)
    first = make_request("a", range(1000, 1100), block_size=size)
    assert manager.allocate_slots(first, 100) is not None
    first.num_computed_tokens = 100
    second = make_request("b", range(1000, 1100), block_size=size)
    hits, num = manager.get_computed_blocks(second)
    full_ids, window_ids = (tuple(ids) for ids in hits.get_block_ids())
    assert (full_ids, window_ids, num) == expected
