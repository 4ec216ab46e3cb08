"""Full attention: every token's KV stays until the request ends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import KVCacheSpec

if TYPE_CHECKING:
    from impl.sched.request import Request


class FullAttentionManager(SingleTypeKVCacheManager):
    looks_up_sub_block_hits = True

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        super().cache_blocks(request, block_hashes, num_tokens)
        if self.hash_block_size < self.block_size:
            self._cache_prompt_tail_boundary(request, num_tokens)

    def _cache_prompt_tail_boundary(self, request: Request, num_tokens: int) -> None:
        """Index the block holding the prompt's last hash boundary under that boundary's hash.

        A request resending this prompt can hit at most num_prompt_tokens - 1 tokens, i.e. up to
        the last hash boundary before that. When the boundary falls inside a (coarser) block,
        the block is findable only through this secondary entry. Asked on every cache call
        once the tokens up to the boundary are cacheable (registering is idempotent): the
        block's promotion to a full block drops the entry, and a later call adds it back
        beside the full hash, as upstream does (EAGLE reaches the boundary before the block is
        full; a streaming session's growing prompt moves the boundary).
        """
        request_id = request.request_id
        hbs = self.hash_block_size
        # An EAGLE lookup reads the whole prompt before dropping a hash unit.
        reach = request.num_prompt_tokens if self.use_eagle else request.num_prompt_tokens - 1
        # (Hashes that cover tokens past their block, 0.33's EAGLE family, exist only as far
        # as those tokens do: the boundary stops at the last hash there is.)
        boundary = min(reach // hbs, len(request.block_hashes)) * hbs
        if boundary <= 0 or boundary % self.block_size == 0 or boundary > num_tokens:
            return
        blocks = self.req_to_blocks.get(request_id)
        index = boundary // self.block_size
        if not blocks or index >= len(blocks):
            return
        num_hash_blocks = boundary // hbs
        self.block_pool.cache_partial_block(
            blocks[index], request.block_hashes[num_hash_blocks - 1], self.kv_cache_group_id,
            boundary, parent_hash=request.block_hashes[num_hash_blocks - 2] if num_hash_blocks > 1
            else None,
            token_ids=request.prompt_token_ids[boundary - hbs:boundary],  # inside the prompt
            lora_name=request.lora_name,
        )

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
        """Scan from the left and stop at the first miss: hashes are chained, so nothing after
        a miss can hit. An EAGLE hit then gives up its last block, and the hit is trimmed to a
        multiple of `alignment_tokens`."""
        block_size = kv_cache_spec.block_size
        num_groups = len(kv_cache_group_ids)
        hits: list[list[KVCacheBlock]] = [[] for _ in range(num_groups)]
        max_blocks = min(max_length // block_size, len(block_hashes))
        if num_groups == 1:
            hash_map = block_pool.hash_map(kv_cache_group_ids[0])
            out = hits[0]
            for index in range(max_blocks):
                # Called on the map, not through a bound method held in a local: compiled, that
                # is a native call per block instead of Python's calling convention.
                block = hash_map.get_one_block(block_hashes[index])
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
        keep = len(hits[0])
        if drop_eagle_block and keep:
            keep -= 1
        if alignment_tokens > block_size:
            keep -= keep % (alignment_tokens // block_size)
        if keep < len(hits[0]):
            for group_hits in hits:
                del group_hits[keep:]
        return hits, keep * block_size
