"""Reference sliding window (R-SWA): full attention over the prompt, a window over the output.

Every generated token attends to the whole prompt (an image and its text, say) and to the last
`rswa_window` generated tokens only. So once decoding has moved on, the blocks that lie wholly
between the prompt's last block and the start of the decode window are never read again and
are given back, replaced by the null block: a request holds its prompt plus about one window
instead of its whole output. The block holding the prompt's last token stays (it is part
prompt). Everything else (prefix hits, caching, admission) is full attention's: the freed
blocks keep their hashes, so another request can still hit them until they are evicted.
"""

from __future__ import annotations

from impl.core.full_attention import FullAttentionManager
from impl.core.specs import ReferenceWindowSpec


class ReferenceWindowManager(FullAttentionManager):
    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        """Drop the gap [first block after the prompt, block of the window's start)."""
        spec = self.kv_cache_spec
        assert isinstance(spec, ReferenceWindowSpec)
        size = self.block_size
        first_gap_block = -(-num_prompt_tokens // size)
        window_start = max(num_prompt_tokens, num_computed_tokens - spec.rswa_window)
        self.remove_blocks_in_range(request_id, first_gap_block, window_start // size)
