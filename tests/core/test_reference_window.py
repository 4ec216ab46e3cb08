"""Reference sliding window (R-SWA): exact block tables as decoding opens the gap.

Layout: 4-token blocks, window 6, block 0 is null. A 10-token prompt fills blocks 1-3 (tokens
0-3, 4-7, 8-9 of the third); the third block is part prompt and stays. The gap starts at the
first block after the prompt and ends at the window's start, max(prompt, processed - 6): an
allocation with 21 tokens processed drops nothing (start 15), at 22 block index 3 (tokens 12-15)
goes, at 26 index 4.
Learnt by probing upstream 0.32.0's RSWAManager with the same calls.
"""

from __future__ import annotations

from impl.core.kv_cache_manager import KVCacheManager
from impl.core.specs import FullAttentionSpec, ReferenceWindowSpec
from impl.sched.request import Request
from tests.core.helpers import admit, make_manager, make_request

PROMPT = list(range(10))


def decode_until(manager: KVCacheManager, request: Request,
                 processed: int) -> list[list[int]]:
    """Decode one token per step; the table after the allocation made with `processed`
    tokens computed."""
    while True:
        request.append_output_token_ids(100 + request.num_computed_tokens)
        assert manager.allocate_slots(request, 1) is not None
        manager.check_integrity()
        if request.num_computed_tokens == processed:
            return [list(ids) for ids in manager.get_block_ids(request.request_id)]
        request.num_computed_tokens += 1


def test_the_gap_after_the_prompt_is_dropped_as_the_window_moves() -> None:
    manager = make_manager(40, ReferenceWindowSpec(block_size=4, rswa_window=6))
    a = make_request("a", PROMPT)
    assert admit(manager, a) == [[1, 2, 3]]
    assert decode_until(manager, a, 21) == [[1, 2, 3, 4, 5, 6]]    # window start 15
    a.num_computed_tokens += 1
    free_before = manager.block_pool.get_num_free_blocks()
    assert decode_until(manager, a, 22) == [[1, 2, 3, 0, 5, 6]]    # 16: index 3 dropped
    assert manager.block_pool.get_num_free_blocks() == free_before + 1
    a.num_computed_tokens += 1
    assert decode_until(manager, a, 26) == [[1, 2, 3, 0, 0, 6, 7]]  # 20: index 4 too
    a.num_computed_tokens += 1
    assert decode_until(manager, a, 28) == [[1, 2, 3, 0, 0, 6, 7, 8]]


def test_dropped_blocks_keep_their_hashes_and_still_serve_hits() -> None:
    manager = make_manager(40, FullAttentionSpec(block_size=4),
                           ReferenceWindowSpec(block_size=4, rswa_window=6))
    a = make_request("a", PROMPT)
    assert admit(manager, a) == [[1, 2, 3], [4, 5, 6]]
    assert decode_until(manager, a, 22) == [[1, 2, 3, 7, 9, 11], [4, 5, 6, 0, 10, 12]]
    b = make_request("b", [*PROMPT, *(100 + i for i in range(10, 17))])
    hits, num_hit = manager.get_computed_blocks(b)
    assert num_hit == 16 and hits.get_block_ids() == ([1, 2, 3, 7], [4, 5, 6, 8])
