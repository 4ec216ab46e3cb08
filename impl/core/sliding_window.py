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
                             boundaries: tuple[int, ...]) -> list[bool] | None:
        """A hit at an aligned length L needs only the window's blocks just before L, so block
        i is worth caching iff some aligned boundary lies in (i, i + needed] blocks. An EAGLE
        hit matches one block more, past L, before giving it back: its run ends one block
        later and is one block longer."""
        needed = self.blocks_needed_for_hit()
        interval = self.retention_interval
        shift = 1 if self.use_eagle else 0
        needed += shift
        if interval == 0:
            return self.replay_tail_mask(start_block, end_block, boundaries, needed, shift)
        # Dense: a tail before every aligned boundary; an interval: one per segment of that
        # many tokens, plus the tails before the reachable boundaries (as retention 0).
        per_segment = (self.cache_hit_alignment if interval is None else interval) \
            // self.block_size
        if per_segment <= needed:
            return None
        mask = [i >= shift and (i - shift) % per_segment >= per_segment - needed
                for i in range(start_block, end_block)]
        if interval is not None:
            tails = self.replay_tail_mask(start_block, end_block, boundaries, needed, shift)
            mask = [segment or tail for segment, tail in zip(mask, tails, strict=True)]
        return mask

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
        drop_eagle_block: bool = False,
    ) -> tuple[list[list[KVCacheBlock]], int]:
        assert isinstance(kv_cache_spec, SlidingWindowSpec)
        block_size = kv_cache_spec.block_size
        # An EAGLE hit gives up its last block, so it needs one more block in its run.
        drop = 1 if drop_eagle_block else 0
        needed = cdiv(kv_cache_spec.sliding_window - 1, block_size) + drop
        max_blocks = min(max_length // block_size, len(block_hashes))
        null_block = block_pool.null_block
        hits = [[null_block] * max_blocks for _ in kv_cache_group_ids]
        per_alignment = alignment_tokens // block_size if alignment_tokens > block_size else 1
        run = 0
        end = -1
        for index in range(max_blocks - 1, -1, -1):
            found = block_pool.get_cached_block(block_hashes[index], kv_cache_group_ids)
            if found is None:
                run = 0
                continue
            # A run can only end where the hit (after the EAGLE drop) lands aligned.
            if run == 0 and (index + 1 - drop) % per_alignment:
                continue
            for group_hits, block in zip(hits, found, strict=True):
                group_hits[index] = block
            run += 1
            if run >= needed:
                end = index + run
                break
        if end < 0:
            # No window-sized run: only the run reaching block 0 is a hit (aligned down).
            end = run - run % per_alignment
        if drop_eagle_block and end > 0:
            end -= 1
            end -= end % per_alignment
        for group_hits in hits:
            del group_hits[end:]
        return hits, end * block_size
