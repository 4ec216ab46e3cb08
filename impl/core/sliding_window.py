"""Sliding-window attention: only the last `sliding_window` tokens are attended to.

Blocks that fall entirely left of the window are freed (replaced by the null block). A prefix
hit needs only the window before the hit point to be cached, so the search runs right to left
looking for enough contiguous cached blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager, cdiv
from impl.core.specs import KVCacheSpec, SlidingWindowSpec


class SlidingWindowManager(SingleTypeKVCacheManager):
    scans_from_left = False

    def blocks_needed_for_hit(self) -> int:
        assert isinstance(self.kv_cache_spec, SlidingWindowSpec)
        return cdiv(self.kv_cache_spec.sliding_window - 1, self.block_size)

    def reachable_block_mask(self, start_block: int, end_block: int,
                             num_prompt_tokens: int) -> list[bool] | None:
        """A hit at an aligned length L needs only the window's blocks just before L, so block
        i is worth caching iff some aligned boundary lies in (i, i + needed] blocks."""
        needed = self.blocks_needed_for_hit()
        if self.retention_interval == 0:
            return self.replay_tail_mask(start_block, end_block, num_prompt_tokens, needed)
        per_alignment = self.cache_hit_alignment // self.block_size
        if per_alignment <= needed:
            return None
        return [(i + needed) // per_alignment > i // per_alignment
                for i in range(start_block, end_block)]

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        assert isinstance(self.kv_cache_spec, SlidingWindowSpec)
        return max(0, num_computed_tokens - self.kv_cache_spec.sliding_window + 1)

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: Sequence[BlockHash],
        max_length: int,
        kv_cache_group_ids: Sequence[int],
        block_pool: BlockPool,
        kv_cache_spec: KVCacheSpec,
        alignment_tokens: int,
    ) -> tuple[list[list[KVCacheBlock]], int]:
        assert isinstance(kv_cache_spec, SlidingWindowSpec)
        block_size = kv_cache_spec.block_size
        needed = cdiv(kv_cache_spec.sliding_window - 1, block_size)
        max_blocks = min(max_length // block_size, len(block_hashes))
        null_block = block_pool.null_block
        hits = [[null_block] * max_blocks for _ in kv_cache_group_ids]
        run = 0
        end = -1
        for index in range(max_blocks - 1, -1, -1):
            found = block_pool.get_cached_block(block_hashes[index], kv_cache_group_ids)
            if found is None:
                run = 0
                continue
            for group_hits, block in zip(hits, found, strict=True):
                group_hits[index] = block
            run += 1
            if run >= needed and ((index + run) * block_size) % alignment_tokens == 0:
                end = index + run
                break
        if end < 0:
            # No window-sized run: only a run starting at block 0 can be a hit.
            end = run if run and hits[0][0] is not null_block else 0
            end -= (end * block_size % alignment_tokens) // block_size
        for group_hits in hits:
            del group_hits[end:]
        return hits, end * block_size
