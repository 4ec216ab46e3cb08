"""Mamba: a recurrent state per request instead of per-token KV.

The group allocates one block per `block_size` tokens like attention, but only the state after
the last computed token is needed: every earlier block is released (replaced by the null block)
as soon as the next one is computed. With prefix caching, the state at each block boundary is
indexed; a hit needs just one block, the state at the hit point, so the search runs right to
left for the longest aligned boundary whose state is cached.

With speculative decoding each request also keeps one block per speculative token past the
running state (the drafts' states: vLLM's `num_speculative_blocks`), so every allocation
counts that many blocks' worth of tokens more.

A state is written by the model only when the step that computes it has run, so a state cached
during the current step cannot serve a hit yet: such a hit is refused (reported as needing
more blocks than the pool has) until the next step starts. The rule is keyed by the *hash* of
the hit, not by the block: when two requests computed the same prefix, the index holds two
blocks under one hash, and a lookup may return the older, already-written one; upstream still
refuses it if any block got that hash during this step, and so must we.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.specs import KVCacheSpec, MambaSpec

if TYPE_CHECKING:
    from impl.sched.request import Request


class MambaManager(SingleTypeKVCacheManager):
    scans_from_left = False
    looks_up_sub_block_hits = True

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, enable_caching: bool,
                 kv_cache_group_id: int) -> None:
        super().__init__(kv_cache_spec, block_pool, enable_caching, kv_cache_group_id)
        # Hashes (not block ids, see the module docstring) cached during the current step.
        self.cached_this_step: set[BlockHash] = set()
        # Tokens past each block its hash covers (0.33's EAGLE family; set by the scheduler).
        self.hash_lookahead = 0

    def reachable_block_mask(self, start_block: int, end_block: int,
                             boundaries: tuple[int, ...]) -> list[bool] | None:
        """A hit needs one state; with sparse retention only the reachable boundaries' are
        kept (the prompt replay's, a shared prefix's junction), and with an interval one more
        per `retention_interval` tokens, at the end of each such segment."""
        interval = self.retention_interval
        if interval is None:
            return None
        mask = self.replay_tail_mask(start_block, end_block, boundaries, 1)
        per_segment = interval // self.block_size
        if interval and per_segment <= 1:
            return None  # every block ends a segment
        if interval:
            for index in range(start_block, end_block):
                if (index + 1) % per_segment == 0:
                    mask[index - start_block] = True
        return mask

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - 1)

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool,
    ) -> int:
        if new_computed_blocks and new_computed_blocks[-1].block_hash in self.cached_this_step:
            return self.block_pool.num_gpu_blocks + 1  # more than the pool: refused this step
        return super().get_num_blocks_to_allocate(
            request_id, num_tokens + self.speculative_tokens, new_computed_blocks,
            total_computed_tokens, apply_admission_cap,
        )

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        return super().allocate_new_blocks(request_id, num_tokens + self.speculative_tokens)

    @property
    def speculative_tokens(self) -> int:
        """The drafts' state blocks, in tokens (0 without speculative decoding)."""
        spec = self.kv_cache_spec
        assert isinstance(spec, MambaSpec)
        return spec.num_speculative_blocks * self.block_size

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        blocks = self.req_to_blocks.get(request.request_id)
        before = self.num_cached_block.get(request.request_id, 0)
        super().cache_blocks(request, block_hashes, num_tokens)
        after = self.num_cached_block.get(request.request_id, 0)
        if blocks is not None:
            self.cached_this_step.update(
                block.block_hash for block in blocks[before:after]
                if not block.is_null and block.block_hash is not None
            )

    def new_step_starts(self) -> None:
        self.cached_this_step.clear()

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
        assert isinstance(kv_cache_spec, MambaSpec)
        block_size = kv_cache_spec.block_size
        max_blocks = min(max_length // block_size, len(block_hashes))
        null_block = block_pool.null_block
        for index in range(max_blocks - 1, -1, -1):
            if ((index + 1) * block_size) % alignment_tokens:
                continue
            found = block_pool.get_cached_block(block_hashes[index], kv_cache_group_ids)
            if found is not None:
                return [[null_block] * index + [block] for block in found], (index + 1) * block_size
        return [[] for _ in kv_cache_group_ids], 0
