"""The hybrid prefix-cache hit search: every attention type must agree on one hit length.

Groups with an equal spec are searched together. Full attention goes first (its scan from the
left is cheap and bounds the rest) and is searched once: it is downward closed, so a shorter
candidate later only trims it. Each other type may shorten the candidate; if one does, the
types are asked again, until none does (the length only falls, so this ends). With exactly two
types, full attention first, one round is enough.

An EAGLE drafter writes the KV of the token after a chunk into the chunk's last block, so each
type's hit gives up one block. A type searched with the drop looks one of its blocks past the
candidate first (the drop lands it back), and drops once per candidate length: a type that
shortens the candidate without dropping lets the others drop again. Mamba never drops (a
drafter has no mamba layers): it finds the state that matches the candidate as it is. With
sub-block hits the drop and the look past are one hash block, not one block.
"""

from __future__ import annotations

from collections.abc import Sequence

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.hashing import hashes_at_block_size
from impl.core.partial_hits import full_attention_hit, mamba_hit
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import FullAttentionSpec, KVCacheSpec, MambaSpec

SpecGroups = Sequence[tuple[KVCacheSpec, list[int]]]


def find_hybrid_hit(
    block_hashes: Sequence[BlockHash], hash_block_size: int, max_length: int,
    spec_groups: SpecGroups, managers: Sequence[SingleTypeKVCacheManager],
    block_pool: BlockPool, alignment: int, use_eagle: bool, sub_block_hits: bool,
) -> tuple[dict[int, list[KVCacheBlock]], int, int]:
    """Hits by group id (groups without a prefix cache absent), the agreed length, and the
    longest length any one type found (the shared-prefix junction's candidate).
    `sub_block_hits`: full attention and mamba look hits up on hash boundaries inside their
    blocks (`impl.core.partial_hits`)."""
    hit_length = max_length
    results: dict[int, list[KVCacheBlock]] = {}
    full_lengths: dict[int, int] = {}  # spec-group index -> its (only) search's length
    longest = 0
    one_round = len(spec_groups) == 2 and isinstance(spec_groups[0][0], FullAttentionSpec)
    dropped: set[int] = set()  # spec groups whose EAGLE drop holds at the candidate
    max_hashed = len(block_hashes) * hash_block_size
    while True:
        candidate = hit_length
        for index, (spec, group_ids) in enumerate(spec_groups):
            if index in full_lengths:
                candidate = min(candidate, full_lengths[index])
                continue
            manager = managers[group_ids[0]]
            drop = use_eagle and index not in dropped
            fine = sub_block_hits and spec.block_size > hash_block_size
            search_length = candidate
            if drop and not isinstance(spec, MambaSpec):
                search_length = min(candidate + (hash_block_size if fine else manager.block_size),
                                    max_hashed)
            if fine and isinstance(spec, MambaSpec):
                hits, found = mamba_hit(block_hashes, search_length, group_ids, block_pool,
                                        spec.block_size, hash_block_size)
            elif fine:
                hits, found = full_attention_hit(block_hashes, search_length, group_ids,
                                                 block_pool, spec.block_size, hash_block_size,
                                                 drop)
            else:
                hashes = hashes_at_block_size(block_hashes, hash_block_size, spec.block_size)
                hits, found = manager.find_longest_cache_hit(
                    hashes, search_length, group_ids, block_pool, spec, alignment, drop)
            if drop:
                dropped.add(index)
            elif found < candidate:
                dropped.clear()
            candidate = found
            if isinstance(spec, FullAttentionSpec):
                full_lengths[index] = found
            for group_id, group_hits in zip(group_ids, hits, strict=True):
                results[group_id] = group_hits
            longest = max(longest, candidate)
        if candidate >= hit_length:
            break
        hit_length = candidate
        if one_round:
            break
    return results, hit_length, longest
