"""KV-cache events with exact shapes, as upstream emits them (learned by comparing the event
stream in lockstep): what a KV-aware router subscribing to the pool would see."""

from __future__ import annotations

from impl.core.block_pool import BlockPool
from impl.core.events import BlockRemoved, BlockStored
from impl.core.specs import FullAttentionSpec, SlidingWindowSpec
from tests.core.helpers import admit, make_manager, make_request

H = [bytes([i]) * 8 for i in range(8)]  # stand-in block hashes


def _pool() -> BlockPool:
    return BlockPool(10, enable_caching=True, enable_kv_cache_events=True)


def test_a_cache_call_whose_blocks_were_all_skipped_still_reports_its_token_range() -> None:
    pool = _pool()
    blocks = [pool.null_block, pool.null_block]
    pool.cache_full_blocks(blocks, H, 0, 2, 1, block_size=16, token_ids=range(32))
    assert pool.take_events() == [BlockStored((), None, tuple(range(32)), 16, None, 1)]
    assert pool.get_num_cached_blocks() == 0


def test_a_prompt_tail_entry_is_announced_with_its_hash_block() -> None:
    pool = _pool()
    [block] = pool.get_new_blocks(1)
    pool.cache_partial_block(block, H[2], 0, 24, parent_hash=H[1], token_ids=range(16, 24))
    assert pool.take_events() == [BlockStored((H[2],), H[1], tuple(range(16, 24)), 8, None, 0)]
    pool.cache_partial_block(block, H[2], 0, 24, parent_hash=H[1], token_ids=range(16, 24))
    assert pool.take_events() == []  # already findable: nothing new to announce


def test_promoting_a_partial_entry_removes_it_before_storing_the_full_hash() -> None:
    pool = _pool()
    first, second = pool.get_new_blocks(2)
    pool.cache_partial_block(second, H[2], 0, 24, parent_hash=H[1], token_ids=range(16, 24))
    pool.take_events()
    pool.cache_full_blocks([first, second], [H[5], H[6]], 0, 2, 0, block_size=16,
                           token_ids=range(32))
    assert pool.take_events() == [
        BlockRemoved((H[2],), 0),
        BlockStored((H[5], H[6]), None, tuple(range(32)), 16, None, 0),
    ]
    assert pool.cached_hashes() == {(0, H[5]), (0, H[6])}


def test_evicting_a_block_with_two_hashes_reports_each_hash_once() -> None:
    pool = _pool()
    [block] = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [H[3]], 0, 1, 0, block_size=16, token_ids=range(16))
    pool.cache_partial_block(block, H[4], 0, 8, token_ids=range(8))
    pool.free_blocks([block])
    pool.take_events()
    pool.get_new_blocks(9)  # the whole free queue: the cached block (at its tail) too
    assert pool.take_events() == [BlockRemoved((H[3],), 0), BlockRemoved((H[4],), 0)]
    pool.check_integrity()


def _decoded_to_a_full_block(block_size: int, prompt: int) -> tuple[list[object], list[bytes]]:
    """Full attention + sliding window, hashes every 8 tokens: a LoRA request's prompt, then
    decoded tokens up to its first block boundary, cached in one call (hybrids cache at whole
    blocks); returns the events and the request's 8-token hashes."""
    from impl.core.specs import FullAttentionSpec, SlidingWindowSpec
    from tests.core.helpers import admit, make_manager, make_request

    manager = make_manager(20, FullAttentionSpec(block_size=block_size),
                           SlidingWindowSpec(block_size=block_size, sliding_window=2 * block_size),
                           hash_block_size=8, events=True)
    request = make_request("a", range(100, 100 + prompt), block_size=8, lora_name="ad",
                           lora_path="/ad")
    admit(manager, request)
    assert manager.take_events() == []  # nothing full yet
    request.num_computed_tokens = prompt
    while request.num_tokens < block_size:
        request.append_output_token(5)
    manager.cache_blocks(request, request.num_tokens)
    return list(manager.take_events()), list(request.block_hashes)


def test_a_prompt_tail_inside_the_first_block_has_no_parent() -> None:
    """Prompt of 12 tokens: a resend can hit 8 (its last hash boundary), inside block 0, so
    block 0 is also findable under the 8-token hash, announced with that hash block's tokens."""
    events, h = _decoded_to_a_full_block(16, 12)
    tokens = (*range(100, 112), 5, 5, 5, 5)
    assert events == [BlockStored((h[1],), None, tokens, 16, "ad", 0),
                      BlockStored((h[0],), None, tuple(range(100, 108)), 8, "ad", 0),
                      BlockStored((h[1],), None, tokens, 16, "ad", 1)]


def test_a_prompt_tail_after_one_hash_block_chains_to_it() -> None:
    """Blocks of 32, prompt of 20: the boundary at 16 is the second hash block's end, whose
    parent is the first hash block."""
    events, h = _decoded_to_a_full_block(32, 20)
    tokens = (*range(100, 120), *(5,) * 12)
    assert events == [BlockStored((h[3],), None, tokens, 32, "ad", 0),
                      BlockStored((h[1],), h[0], tuple(range(108, 116)), 8, "ad", 0),
                      BlockStored((h[3],), None, tokens, 32, "ad", 1)]


def test_a_full_block_can_carry_several_prompt_tail_entries() -> None:
    """Two prompts ending at different boundaries inside the same cached block: each boundary
    gets its entry (and its event); repeating one adds nothing."""
    pool = _pool()
    [block] = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [H[3]], 0, 1, 0, block_size=16, token_ids=range(16))
    pool.take_events()
    pool.cache_partial_block(block, H[4], 0, 8, token_ids=range(8))
    pool.cache_partial_block(block, H[5], 0, 4, token_ids=range(4))
    pool.cache_partial_block(block, H[4], 0, 8, token_ids=range(8))
    assert pool.take_events() == [BlockStored((H[4],), None, tuple(range(8)), 8, None, 0),
                                  BlockStored((H[5],), None, tuple(range(4)), 4, None, 0)]
    assert block.extra_hashes == [H[4], H[5]]
    pool.check_integrity()


def test_a_prompt_tail_at_the_first_token_with_one_token_hash_blocks() -> None:
    """Hash blocks of 1 token, blocks of 4, a 2-token prompt: a resend can hit 1 token, so
    block 0 is findable under the first token's hash (the smallest boundary there is)."""
    from impl.core.specs import FullAttentionSpec, SlidingWindowSpec
    from tests.core.helpers import admit, make_manager, make_request

    manager = make_manager(20, FullAttentionSpec(block_size=4),
                           SlidingWindowSpec(block_size=4, sliding_window=8),
                           hash_block_size=1, events=True)
    request = make_request("a", (100, 101), block_size=1)
    admit(manager, request)
    request.num_computed_tokens = 2
    while request.num_tokens < 4:
        request.append_output_token(5)
    manager.cache_blocks(request, request.num_tokens)
    h = request.block_hashes
    assert manager.take_events() == [BlockStored((h[3],), None, (100, 101, 5, 5), 4, None, 0),
                                     BlockStored((h[0],), None, (100,), 1, None, 0),
                                     BlockStored((h[3],), None, (100, 101, 5, 5), 4, None, 1)]


def test_full_report_mode_announces_reused_blocks_on_every_lookup_that_hits() -> None:
    """`kv_cache_report_mode: "full"`: a lookup that hits reports the hit as one stored event
    per group from token 0 (no parent), on each lookup, admitted or not; per group the count
    includes a window's skipped positions. Regressions: `kv-events-full-mode*.jsonl`."""
    manager = make_manager(12, FullAttentionSpec(block_size=4),
                           SlidingWindowSpec(block_size=4, sliding_window=4), events=True)
    first = make_request("a", range(100, 113))  # 13 tokens: 3 full blocks cached
    assert admit(manager, first) is not None
    manager.take_events()
    quiet = make_request("b", range(100, 113))
    manager.get_computed_blocks(quiet)
    assert manager.take_events() == []  # incremental (the default): a hit is not news
    full = make_request("c", range(100, 113), report_reused_blocks=True)
    hits, num_hit = manager.get_computed_blocks(full)
    assert num_hit == 12
    assert [len(group) for group in hits.blocks] == [3, 3]  # the window's: null, null, block
    hashes = tuple(full.block_hashes[:3])
    stored = [BlockStored(hashes, None, tuple(range(100, 112)), 4, None, group)
              for group in (0, 1)]
    assert manager.take_events() == stored
    manager.get_computed_blocks(full)  # looked up again (say, not admitted last step)
    assert manager.take_events() == stored
    miss = make_request("d", range(500, 513), report_reused_blocks=True)
    manager.get_computed_blocks(miss)
    assert manager.take_events() == []


def test_a_partial_key_at_a_longer_boundary_replaces_the_shorter_one() -> None:
    """A streaming session's next part moves its prompt's last hash boundary further into the
    same block: the block drops the shorter boundary's key (a removal event) and takes the
    longer one as its primary key, as upstream re-keys it. A shorter boundary afterwards, or
    a block whose primary key is a full block's, only adds a key."""
    pool = _pool()
    block, full = pool.get_new_blocks(2)
    pool.cache_partial_block(block, H[1], 0, 2, token_ids=range(2))
    pool.cache_partial_block(block, H[2], 0, 4, parent_hash=H[1], token_ids=range(2, 4))
    assert pool.take_events() == [BlockStored((H[1],), None, tuple(range(2)), 2, None, 0),
                                  BlockRemoved((H[1],), 0),
                                  BlockStored((H[2],), H[1], tuple(range(2, 4)), 2, None, 0)]
    assert (block.block_hash, block.extra_hashes) == (H[2], None)
    pool.cache_partial_block(block, H[1], 0, 2, token_ids=range(2))
    assert block.extra_hashes == [H[1]]
    pool.cache_full_blocks([full], [H[3]], 0, 1, 0, block_size=16, token_ids=range(16))
    pool.cache_partial_block(full, H[4], 0, 8, token_ids=range(8))
    pool.cache_partial_block(full, H[5], 0, 12, token_ids=range(12))
    assert (full.block_hash, full.extra_hashes) == (H[3], [H[4], H[5]])
    assert pool.cached_hashes() == {(0, H[n]) for n in (1, 2, 3, 4, 5)}
    pool.check_integrity()
