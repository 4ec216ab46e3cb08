"""Full attention: every token's KV stays until the request ends."""

from __future__ import annotations

from collections.abc import Sequence

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import KVCacheSpec


class FullAttentionManager(SingleTypeKVCacheManager):
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
        """Scan from the left and stop at the first miss: hashes are chained, so nothing after
        a miss can hit. The hit is then trimmed to a multiple of `alignment_tokens`."""
        block_size = kv_cache_spec.block_size
        num_groups = len(kv_cache_group_ids)
        hits: list[list[KVCacheBlock]] = [[] for _ in range(num_groups)]
        max_blocks = min(max_length // block_size, len(block_hashes))
        if num_groups == 1:
            hash_map = block_pool.hash_map(kv_cache_group_ids[0])
            get = hash_map.get_one_block
            out = hits[0]
            for index in range(max_blocks):
                block = get(block_hashes[index])
                if block is None:
                    break
                out.append(block)
        else:
            for index in range(max_blocks):
                found = block_pool.get_cached_block(block_hashes[index], kv_cache_group_ids)
                if found is None:
                    break
                for group_hits, block in zip(hits, found, strict=True):
                    group_hits.append(block)
        if alignment_tokens > block_size:
            per_alignment = alignment_tokens // block_size
            keep = len(hits[0]) - len(hits[0]) % per_alignment
            for group_hits in hits:
                del group_hits[keep:]
        return hits, len(hits[0]) * block_size
