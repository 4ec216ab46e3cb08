"""Chunked local attention: tokens attend only within their chunk of `attention_chunk_size`.

Blocks of finished chunks are freed; a hit treats every block before the current chunk as
computed (null) and scans the current chunk from its start.
"""

from __future__ import annotations

from collections.abc import Sequence

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import ChunkedLocalAttentionSpec, KVCacheSpec


class ChunkedLocalAttentionManager(SingleTypeKVCacheManager):
    scans_from_left = False

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        assert isinstance(self.kv_cache_spec, ChunkedLocalAttentionSpec)
        chunk = self.kv_cache_spec.attention_chunk_size
        return (num_computed_tokens // chunk) * chunk

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
        assert isinstance(kv_cache_spec, ChunkedLocalAttentionSpec)
        if drop_eagle_block:  # upstream asserts too; the workload format refuses the pair
            raise ValueError("kv_cache_groups: chunked local attention with an EAGLE drafter "
                             "is not supported (upstream refuses it at the first lookup)")
        block_size = kv_cache_spec.block_size
        chunk = kv_cache_spec.attention_chunk_size
        max_blocks = max_length // block_size
        local_start_block = ((max_length // chunk) * chunk) // block_size
        null_block = block_pool.null_block
        hits = [[null_block] * local_start_block for _ in kv_cache_group_ids]
        for index in range(local_start_block, min(max_blocks, len(block_hashes))):
            found = block_pool.get_cached_block(block_hashes[index], kv_cache_group_ids)
            if found is None:
                break
            for group_hits, block in zip(hits, found, strict=True):
                group_hits.append(block)
        num_blocks = len(hits[0])
        num_blocks -= (num_blocks * block_size % alignment_tokens) // block_size
        for group_hits in hits:
            del group_hits[num_blocks:]
        return hits, num_blocks * block_size
