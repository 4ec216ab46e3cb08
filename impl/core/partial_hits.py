"""Sub-block prefix-cache hits: a hit that ends inside a block, and the copy-on-write it needs.

Why: a hybrid model with mamba layers in 'align' mode has large blocks (a mamba state is big,
and attention blocks are sized to match), so block-granular hits would throw away up to a
block of shared prefix on every resend. With hashes finer than the block (`hash_block_size`,
vLLM's `prefix_match_unit`), a hit may end on any hash boundary:

- full attention takes the run of cached full blocks, then probes the boundaries inside the
  next block from the right: a block is findable there only through the *partial* entry the
  prompt's last hash boundary registered on it (`FullAttentionManager.cache_blocks`);
- mamba looks for the rightmost hash boundary whose state is cached, whole block or not.

A hit that ends inside a block shares a block the request will write into, so the request
takes a private copy of it (copy-on-write): the allocation swaps a fresh block into the table
at that position, and the step's scheduler output carries (source, copy) for the worker to run
before its forward (`KVCacheManager.take_block_copies`). Both blocks hold one extra reference
until then, so a free in the same step cannot hand either out again.

A running mamba request whose chunk ends on its prompt's last hash boundary registers the state
there as a partial entry; its next step would overwrite that block, so that allocation moves
the cache entry to a fresh copy instead (the request keeps writing into its own block).

On only when every prefix-cached group can look up sub-block hits (full attention, mamba) or
hashes at its own block size, and a mamba 'align' group has blocks wider than the hash block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.specs import KVCacheConfig, MambaSpec

if TYPE_CHECKING:
    from impl.core.single_type_manager import SingleTypeKVCacheManager


def sub_block_hits_enabled(kv_cache_config: KVCacheConfig, hash_block_size: int,
                           lookups_sub_block: Sequence[bool]) -> bool:
    """Whether hits may end inside a block; `lookups_sub_block[g]`: group g's manager can
    look such hits up. Under DCP a mamba state at the hash block's size is enough (the
    full-attention blocks it sits beside are the scaled, coarser ones)."""
    groups = kv_cache_config.kv_cache_groups
    dcp = kv_cache_config.dcp_world_size > 1
    if not any(isinstance(g.kv_cache_spec, MambaSpec) and g.kv_cache_spec.mamba_cache_mode
               == "align" and (g.kv_cache_spec.block_size > hash_block_size
                               or dcp and g.kv_cache_spec.block_size == hash_block_size)
               for g in groups):
        return False
    return all(not group.kv_cache_spec.prefix_cacheable or can_look_up
               or group.kv_cache_spec.block_size == hash_block_size
               for group, can_look_up in zip(groups, lookups_sub_block, strict=True))


def full_attention_hit(
    fine_hashes: Sequence[BlockHash], max_length: int, group_ids: Sequence[int],
    block_pool: BlockPool, block_size: int, hash_block_size: int, drop_eagle: bool = False,
) -> tuple[list[list[KVCacheBlock]], int]:
    """The cached full blocks from the left, then the longest boundary inside the next block
    that still hits. `fine_hashes[i]` is the hash of the prefix of (i + 1) * hash_block_size
    tokens, so block b is keyed by entry (b + 1) * ratio - 1. `drop_eagle`: an EAGLE hit gives
    up its last hash block (the block it ends in still holds the shorter prefix)."""
    ratio = block_size // hash_block_size
    hits: list[list[KVCacheBlock]] = [[] for _ in group_ids]
    max_blocks = min(max_length // block_size, len(fine_hashes) // ratio)
    for index in range(max_blocks):
        found = block_pool.get_cached_block(fine_hashes[(index + 1) * ratio - 1], group_ids)
        if found is None:
            break
        for group_hits, block in zip(hits, found, strict=True):
            group_hits.append(block)
    length = len(hits[0]) * block_size
    first = len(hits[0]) * ratio
    last = min(first + ratio - 1, max_length // hash_block_size, len(fine_hashes))
    for fine in range(last - 1, first - 1, -1):
        found = block_pool.get_cached_block(fine_hashes[fine], group_ids)
        if found is not None:
            for group_hits, block in zip(hits, found, strict=True):
                group_hits.append(block)
            length = (fine + 1) * hash_block_size
            break
    if drop_eagle and length > 0:
        length -= hash_block_size
        num_blocks = -(-length // block_size)
        for group_hits in hits:
            del group_hits[num_blocks:]
    return hits, length


def mamba_hit(
    fine_hashes: Sequence[BlockHash], max_length: int, group_ids: Sequence[int],
    block_pool: BlockPool, block_size: int, hash_block_size: int,
) -> tuple[list[list[KVCacheBlock]], int]:
    """The rightmost hash boundary whose state is cached: null blocks up to the state's block,
    then the state."""
    null_block = block_pool.null_block
    ratio = block_size // hash_block_size
    for fine in range(min(max_length // hash_block_size, len(fine_hashes)) - 1, -1, -1):
        found = block_pool.get_cached_block(fine_hashes[fine], group_ids)
        if found is not None:
            index = fine // ratio
            return [[null_block] * index + [block] for block in found], \
                (fine + 1) * hash_block_size
    return [[] for _ in group_ids], 0


def truncate_hit(hits: Sequence[list[KVCacheBlock]], num_tokens: int,
                 managers: Sequence[SingleTypeKVCacheManager]) -> tuple[list[KVCacheBlock], ...]:
    """A local hit cut back to `num_tokens` (a whole block of every group): a KV connector's
    longer hit supersedes the sub-block tail, so the request loads it rather than copying the
    shared block. Blocks are only dropped from the lists (references untouched); a mamba
    group keeps what it has up to there (its state may come from the connector)."""
    cut: list[list[KVCacheBlock]] = []
    for group_hits, manager in zip(hits, managers, strict=True):
        spec = manager.kv_cache_spec
        if not spec.prefix_cacheable:
            cut.append([])
            continue
        if num_tokens % manager.block_size:
            raise ValueError(f"truncate_hit: {num_tokens} tokens end inside a block of group "
                             f"{manager.kv_cache_group_id}")
        num_blocks = num_tokens // manager.block_size
        if not isinstance(spec, MambaSpec) and num_blocks > len(group_hits):
            raise ValueError(f"truncate_hit: group {manager.kv_cache_group_id} holds "
                             f"{len(group_hits)} blocks, fewer than {num_tokens} tokens need")
        cut.append(list(group_hits[:num_blocks]))
    return tuple(cut)
