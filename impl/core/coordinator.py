"""KV-cache coordinators: fan a request's allocation out to one manager per KV-cache group.

Three kinds, picked by `get_kv_cache_coordinator`: no prefix cache (any number of groups),
unitary (one group: its manager finds the hit), hybrid (several attention types: each type
may shorten the candidate hit until all agree, a fixed point).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.core.block import KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.context_parallel import check_reused_block_events, rank_block_size
from impl.core.hashing import hashes_at_block_size
from impl.core.hit_search import find_hybrid_hit
from impl.core.manager_types import manager_class_for, tokens_for
from impl.core.partial_hits import sub_block_hits_enabled
from impl.core.single_type_manager import SingleTypeKVCacheManager, cdiv
from impl.core.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    MambaSpec,
    check_hash_block_size,
)
from vtwin.errors import ReleaseCheckFailed

if TYPE_CHECKING:
    from impl.sched.request import Request

PerGroupBlocks = tuple[list[KVCacheBlock], ...]


class KVCacheCoordinator:
    def __init__(
        self,
        kv_cache_config: KVCacheConfig,
        enable_caching: bool,
        hash_block_size: int,
        enable_kv_cache_events: bool,
        use_eagle: bool = False,
    ) -> None:
        check_hash_block_size(kv_cache_config, hash_block_size)
        self.hash_block_size = hash_block_size
        self.dcp_world_size = kv_cache_config.dcp_world_size
        # An EAGLE drafter: every group's hit gives up its last block (`impl.core.hit_search`).
        self.use_eagle = use_eagle
        # A chain of MTP modules may compute the last (look-ahead - 1) tokens again, drafting
        # from prompt tokens at the next chunk: their KV is not final, so it is not indexed
        # (`KVCacheManager` sets it from the drafter's prefill look-ahead).
        self.num_reprefillable_tokens = 0
        self.block_pool = BlockPool(kv_cache_config.num_blocks, enable_caching,
                                    enable_kv_cache_events=enable_kv_cache_events)
        self.managers: list[SingleTypeKVCacheManager] = [
            manager_class_for(group.kv_cache_spec)(
                group.kv_cache_spec, self.block_pool, enable_caching, group_id
            )
            for group_id, group in enumerate(kv_cache_config.kv_cache_groups)
        ]
        for manager in self.managers:
            manager.hash_block_size = hash_block_size
            manager.retention_interval = kv_cache_config.prefix_cache_retention_interval
            manager.use_eagle = use_eagle
        sizes = kv_cache_config.block_sizes
        self.scheduler_block_size = math.lcm(*sizes)
        # Hits may end inside a block (`impl.core.partial_hits`): then they land on hash
        # boundaries, else on the scheduler block (the lcm of the group block sizes).
        self.sub_block_hits = enable_caching and len(self.managers) > 1 and \
            sub_block_hits_enabled(kv_cache_config, hash_block_size,
                                   [m.looks_up_sub_block_hits for m in self.managers])
        self.cache_hit_alignment = (hash_block_size if self.sub_block_hits
                                    else self.scheduler_block_size)
        if len(self.managers) > 1:
            for manager in self.managers:
                manager.cache_hit_alignment = self.cache_hit_alignment
                manager.scheduler_block_size = self.scheduler_block_size
                manager.partial_hits = self.sub_block_hits

    def turn_off_sub_block_hits(self) -> None:
        """Hits on the scheduler block only, whatever the hashes (the CPU tier's pool in lazy
        mode: upstream builds it without partial hash hits)."""
        self.sub_block_hits = False
        self.cache_hit_alignment = self.scheduler_block_size
        if len(self.managers) > 1:
            for manager in self.managers:
                manager.cache_hit_alignment = self.cache_hit_alignment
                manager.partial_hits = False

    def get_num_blocks_to_allocate(
        self, request_id: str, num_tokens: int, new_computed_blocks: PerGroupBlocks,
        total_computed_tokens: int, apply_admission_cap: bool = False,
        num_tokens_main: int | None = None, num_encoder_tokens: int = 0,
    ) -> int:
        """`num_tokens_main`: the tokens without lookahead slots, for the groups that take
        none (`ignores_lookahead`); None: the same as `num_tokens`. `num_encoder_tokens`: the
        encoder outputs this step writes, for cross-attention groups (`sized_by_encoder`)."""
        return sum(
            manager.get_num_blocks_to_allocate(
                request_id, tokens_for(manager, num_tokens, num_tokens_main, num_encoder_tokens),
                new_computed_blocks[index], total_computed_tokens, apply_admission_cap,
            )
            for index, manager in enumerate(self.managers)
        )

    def emit_reused_block_events(self, request: Request, hits: PerGroupBlocks) -> None:
        """A stored event per group with a hit, for its first `len(hits[g])` blocks (skipped
        positions included), as if they had just been cached from token 0."""
        for group_id, blocks in enumerate(hits):
            if not blocks:
                continue
            # Upstream reports at the group's per-rank block (DCP: a fraction of the view's).
            size = rank_block_size(self.managers[group_id].kv_cache_spec, self.dcp_world_size)
            check_reused_block_events(request.request_id, group_id, size, self.hash_block_size)
            hashes = hashes_at_block_size(request.block_hashes, self.hash_block_size, size)
            if len(blocks) > len(hashes):
                # A sub-block hit inside the prompt's last, partial block: it has no block
                # hash, and upstream indexes past its list of them.
                raise ReleaseCheckFailed("reused-events-partial-block", (
                    f"request {request.request_id}: the full-report KV events of its "
                    f"{len(blocks)}-block hit in group {group_id} need {len(blocks)} block "
                    f"hashes and the prompt has {len(hashes)} (a hit ending inside its last, "
                    "partial block)"))
            self.block_pool.emit_stored(
                tuple(hashes[i] for i in range(len(blocks))),
                request.all_token_ids[:len(blocks) * size], size, request.lora_name,
                group_id)

    def add_computed_blocks(
        self, request_id: str, new_computed_blocks: PerGroupBlocks, total_computed_tokens: int
    ) -> None:
        for index, manager in enumerate(self.managers):
            manager.add_computed_blocks(
                request_id, new_computed_blocks[index], total_computed_tokens
            )

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main: int | None = None,
                            num_encoder_tokens: int = 0) -> PerGroupBlocks:
        return tuple(
            manager.allocate_new_blocks(
                request_id, tokens_for(manager, num_tokens, num_tokens_main, num_encoder_tokens))
            for manager in self.managers)

    def get_num_cacheable_tokens(self, num_computed_tokens: int, group: int) -> int:
        """The prefix of `num_computed_tokens` a group indexes: every token whose KV is final
        (`num_reprefillable_tokens`)."""
        return max(0, num_computed_tokens - self.num_reprefillable_tokens)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        num_computed_tokens = self.get_num_cacheable_tokens(num_computed_tokens, 0)
        for manager in self.managers:
            if not manager.kv_cache_spec.prefix_cacheable:
                continue  # its blocks are private to the request (bounded replay)
            hashes = hashes_at_block_size(
                request.block_hashes, self.hash_block_size, manager.block_size
            )
            manager.cache_blocks(request, hashes, num_computed_tokens)

    def free(self, request_id: str) -> None:
        for manager in self.managers:
            manager.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Every group's blocks of the request, group after group, still referenced."""
        return [block for manager in self.managers
                for block in manager.pop_blocks_for_free(request_id)]

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed: int,
                                          num_external: int) -> None:
        for manager in self.managers:
            manager.allocate_external_computed_blocks(request_id, num_local_computed,
                                                      num_external)

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        for manager in self.managers:
            manager.remove_skipped_blocks(request_id, num_computed_tokens, num_prompt_tokens)

    def get_blocks(self, request_id: str) -> PerGroupBlocks:
        return tuple(manager.req_to_blocks.get(request_id, []) for manager in self.managers)

    def find_longest_cache_hit(
        self, request: Request, max_cache_hit_length: int
    ) -> tuple[PerGroupBlocks, int]:
        """Overridden by the coordinators that cache; with prefix caching off the manager never
        searches (`get_computed_blocks` answers no hit before asking)."""
        raise NotImplementedError("prefix caching is off: there is no cache-hit search")

    def find_cache_hit_and_junction(
        self, request: Request, max_cache_hit_length: int
    ) -> tuple[PerGroupBlocks, int, int]:
        """The hit, its length, and the shared-prefix junction: the longest hit any single
        group found when it is longer than the hit all groups agree on (0 otherwise). There a
        sparse group (mamba) has no state yet though the prefix is shared, so the scheduler
        ends a chunk there to cache one. One group: no junction."""
        hits, length = self.find_longest_cache_hit(request, max_cache_hit_length)
        return hits, length, 0

    def new_step_starts(self) -> None:
        for manager in self.managers:
            manager.new_step_starts()

    def check_integrity(self, extra_holders: dict[int, int] | None = None) -> None:
        """Raise `IntegrityError` on a broken invariant of any group or of the pool.

        Each block's ref_cnt must equal the number of block tables (over every group) holding
        it, plus `extra_holders` (references held outside the tables: a connector's transfers,
        frees deferred past a step in flight): the pool checks that against `holders`.
        """
        holders: dict[int, int] = dict(extra_holders or {})
        for manager in self.managers:
            manager.check_integrity()
            for pair in manager.pending_copies:  # both ends held until the output carries it
                for block in pair:
                    holders[block.block_id] = holders.get(block.block_id, 0) + 1
            for blocks in manager.req_to_blocks.values():
                for block in blocks:
                    if not block.is_null:
                        holders[block.block_id] = holders.get(block.block_id, 0) + 1
        self.block_pool.check_integrity(holders)


class KVCacheCoordinatorNoPrefixCache(KVCacheCoordinator):
    """Prefix caching off: nothing is hashed or looked up; any number of groups."""


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """One group: its manager's own cache-hit search is the answer."""

    def __init__(self, kv_cache_config: KVCacheConfig, enable_caching: bool,
                 hash_block_size: int, enable_kv_cache_events: bool,
                 use_eagle: bool = False) -> None:
        super().__init__(kv_cache_config, enable_caching, hash_block_size,
                         enable_kv_cache_events, use_eagle)
        block_size = self.managers[0].block_size
        if self.hash_block_size != block_size:
            raise ValueError(
                f"hash_block_size: {self.hash_block_size} must equal the block size "
                f"{block_size} of the only KV-cache group"
            )

    def find_longest_cache_hit(
        self, request: Request, max_cache_hit_length: int
    ) -> tuple[PerGroupBlocks, int]:
        manager = self.managers[0]
        hashes = hashes_at_block_size(request.block_hashes, self.hash_block_size,
                                      manager.block_size)
        hits, length = manager.find_longest_cache_hit(
            hashes, max_cache_hit_length, [0], self.block_pool, manager.kv_cache_spec,
            manager.block_size, self.use_eagle,
        )
        return (hits[0],), length


class HybridKVCacheCoordinator(KVCacheCoordinator):
    """Several attention types; groups with an equal spec are looked up together."""

    def __init__(self, kv_cache_config: KVCacheConfig, enable_caching: bool,
                 hash_block_size: int, enable_kv_cache_events: bool,
                 use_eagle: bool = False) -> None:
        super().__init__(kv_cache_config, enable_caching, hash_block_size,
                         enable_kv_cache_events, use_eagle)
        by_spec: dict[KVCacheSpec, list[int]] = {}
        for group_id, manager in enumerate(self.managers):
            # A group without a prefix cache takes no part in the search: its hit stays empty.
            if manager.kv_cache_spec.prefix_cacheable:
                by_spec.setdefault(manager.kv_cache_spec, []).append(group_id)
        # Full attention first: its left-to-right scan is cheap and bounds the others.
        self.spec_groups: list[tuple[KVCacheSpec, list[int]]] = sorted(
            by_spec.items(), key=lambda item: not isinstance(item[0], FullAttentionSpec)
        )
        first_spec, first_groups = self.spec_groups[0] if self.spec_groups else (None, [])
        self.full_attention_group = (first_groups[0] if isinstance(first_spec, FullAttentionSpec)
                                     else None)
        self.has_mamba = any(isinstance(m.kv_cache_spec, MambaSpec) for m in self.managers)

    def get_num_cacheable_tokens(self, num_computed_tokens: int, group: int) -> int:
        """Only a prefix a future hit can match is worth indexing: hybrid hits are aligned to
        the scheduler block size (the lcm of the group block sizes). An EAGLE hit matches one
        of the group's blocks past an aligned boundary before dropping it, so with EAGLE each
        group indexes one block more where its finalized tokens reach it."""
        # (With sub-block hits nothing is rounded: even a hash-block rounding would key a
        # mamba tail again after its copy-on-write made it private.)
        unit = 1 if self.sub_block_hits else self.scheduler_block_size
        aligned = num_computed_tokens - num_computed_tokens % unit
        if not self.use_eagle or aligned == 0:
            return aligned  # (as upstream: reprefillable tokens are held back on EAGLE's path)
        num_finalized = max(0, num_computed_tokens - self.num_reprefillable_tokens)
        return min(num_finalized,
                   num_finalized - num_finalized % unit + self.managers[group].block_size)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        for group, manager in enumerate(self.managers):
            if not manager.kv_cache_spec.prefix_cacheable:
                continue
            hashes = hashes_at_block_size(request.block_hashes, self.hash_block_size,
                                          manager.block_size)
            manager.cache_blocks(request, hashes,
                                 self.get_num_cacheable_tokens(num_computed_tokens, group))

    def find_longest_cache_hit(
        self, request: Request, max_cache_hit_length: int
    ) -> tuple[PerGroupBlocks, int]:
        hits, length, _ = self.find_cache_hit_and_junction(request, max_cache_hit_length)
        return hits, length

    def find_cache_hit_and_junction(
        self, request: Request, max_cache_hit_length: int
    ) -> tuple[PerGroupBlocks, int, int]:
        results, hit_length, longest = find_hybrid_hit(
            request.block_hashes, self.hash_block_size, max_cache_hit_length, self.spec_groups,
            self.managers, self.block_pool, self.cache_hit_alignment, self.use_eagle,
            self.sub_block_hits)
        per_group = tuple(
            results.get(group_id, [])[: cdiv(hit_length, self.managers[group_id].block_size)]
            for group_id in range(len(self.managers))
        )
        return per_group, hit_length, longest if longest > hit_length else 0


def get_kv_cache_coordinator(
    kv_cache_config: KVCacheConfig,
    enable_caching: bool,
    hash_block_size: int,
    enable_kv_cache_events: bool,
    use_eagle: bool = False,
) -> KVCacheCoordinator:
    if not enable_caching:
        return KVCacheCoordinatorNoPrefixCache(
            kv_cache_config, False, hash_block_size, enable_kv_cache_events, use_eagle
        )
    if len(kv_cache_config.kv_cache_groups) == 1:
        return UnitaryKVCacheCoordinator(
            kv_cache_config, True, hash_block_size, enable_kv_cache_events, use_eagle
        )
    return HybridKVCacheCoordinator(
        kv_cache_config, True, hash_block_size, enable_kv_cache_events, use_eagle
    )


__all__ = ["KVCacheCoordinator", "get_kv_cache_coordinator", "Sequence"]
