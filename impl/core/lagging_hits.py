"""Local hits a P/D connector completes: full attention's own hit past a lagging mamba state.

On a hybrid model the groups' hits can part under block pressure or sparse retention: full
attention may still hold a prefix whose mamba state was never kept or was evicted. A prefill/
decode connector (vLLM's `supports_divergent_local_hybrid_hits`: NIXL) pulls the prompt past
the local hit *and* the recurrent state, so a decode side may keep full attention's deeper
hit: the pull brings the state the lagging group lacks. When nothing is pulled, no state
comes, and the request must fall back to the hit every group agrees on (the scheduler does,
`impl.sched.admission`). A group hitting deeper than full attention means full attention's
tail was evicted: the agreed hit then. The lookup finds no shared-prefix junction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.core.block import KVCacheBlock
from impl.core.coordinator import (
    HybridKVCacheCoordinator,
    KVCacheCoordinator,
    PerGroupBlocks,
)
from impl.core.hashing import hashes_at_block_size
from impl.core.partial_hits import full_attention_hit, mamba_hit
from impl.core.specs import MambaSpec

if TYPE_CHECKING:
    from impl.sched.request import Request


def find_hit_per_group(coordinator: HybridKVCacheCoordinator, request: Request,
                       max_length: int) -> tuple[PerGroupBlocks, tuple[int, ...]]:
    """Each attention type's own longest hit, not reconciled to one length: blocks and
    length per group (a group without a prefix cache: none). With EAGLE each type but mamba
    looks one of its blocks past `max_length` and gives its last block up, as in the agreed
    search (`impl.core.hit_search`). With sub-block hits on, full attention and mamba look
    their hits up on hash boundaries as the agreed search does (`impl.core.partial_hits`;
    an EAGLE look-ahead is then one hash block), so a decode side's hit may end inside a
    block and take a copy of it."""
    blocks: list[list[KVCacheBlock]] = [[] for _ in coordinator.managers]
    lengths = [0] * len(coordinator.managers)
    eagle = coordinator.use_eagle
    hash_block_size = coordinator.hash_block_size
    max_hashed = len(request.block_hashes) * hash_block_size
    pool = coordinator.block_pool
    for spec, group_ids in coordinator.spec_groups:
        manager = coordinator.managers[group_ids[0]]
        fine = coordinator.sub_block_hits and spec.block_size > hash_block_size
        drop = eagle and not isinstance(spec, MambaSpec)
        margin = hash_block_size if fine else manager.block_size
        search_length = min(max_length + margin, max_hashed) if drop else max_length
        if fine and isinstance(spec, MambaSpec):
            hits, found = mamba_hit(request.block_hashes, search_length, group_ids, pool,
                                    spec.block_size, hash_block_size)
        elif fine:
            hits, found = full_attention_hit(request.block_hashes, search_length, group_ids,
                                             pool, spec.block_size, hash_block_size, drop)
        else:
            hashes = hashes_at_block_size(request.block_hashes, hash_block_size,
                                          spec.block_size)
            hits, found = manager.find_longest_cache_hit(
                hashes, search_length, group_ids, pool, spec,
                coordinator.cache_hit_alignment, drop)
        for group_id, group_hits in zip(group_ids, hits, strict=True):
            blocks[group_id] = group_hits
            lengths[group_id] = found
    return tuple(blocks), tuple(lengths)


def lagging_hit(coordinator: KVCacheCoordinator, request: Request
                ) -> tuple[PerGroupBlocks, int, bool] | None:
    """(each group's blocks as found, full attention's hit, whether a group lags behind it),
    or None where the agreed hit stands: no mamba or no full-attention group, or a group
    deeper than full attention. The caller has checked that the lookup is enabled."""
    if not (isinstance(coordinator, HybridKVCacheCoordinator) and coordinator.has_mamba):
        return None
    full = coordinator.full_attention_group
    if full is None:
        return None
    hits, lengths = find_hit_per_group(coordinator, request, request.num_tokens - 1)
    if any(length > lengths[full] for length in lengths):
        return None
    return hits, lengths[full], min(lengths) < lengths[full]
