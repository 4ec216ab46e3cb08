"""Mamba: a recurrent state per request instead of per-token KV.

In cache mode "none" a request holds one state block (plus speculative ones) for its whole life
and nothing is prefix-cached.
"""

from __future__ import annotations

from collections.abc import Sequence

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import KVCacheSpec, MambaSpec


class MambaManager(SingleTypeKVCacheManager):
    scans_from_left = False

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - 1)

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
        assert isinstance(kv_cache_spec, MambaSpec)
        return [[] for _ in kv_cache_group_ids], 0
