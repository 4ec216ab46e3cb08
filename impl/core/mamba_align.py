"""Mamba in 'align' cache mode: states kept only where a chunk ends on a block boundary.

In 'align' mode the model writes a request's state into the block of the position its chunk
ends at, and the scheduler (`impl.sched.mamba_split`) makes prefill chunks end on block
boundaries, so every such block holds "the state after exactly (i + 1) * block_size tokens" and
can be indexed for prefix hits. A request's table is positional but mostly null:

    index:    0     1     2     3     4     5     6
    blocks: null  null   S1   null  null  null   S2      <- after a chunk ending in block 6
                          ^ previous state: the chunk in block 6 starts from it

Each allocation adds at most one real block (the new state) and pads the gap before it with null
blocks. The next chunk starts from the previous state, so a state is released only once the
tokens after it are processed: every block left of the last processed token's block is retired
then (`num_retired_blocks` is how far retirement went, since the table has null gaps a walk
back cannot stop at). The state a chunk starts from lies left of the chunk's last block, so it
goes with the rest as soon as that chunk is processed.

Sizing matches: a request needs min(1, blocks still missing) new blocks per step, plus the prefix
hit if it sits free in the queue, whatever the chunk length; the admission gate asks the same.

With speculative decoding the table also holds one block per speculative token past the state
block (the drafts' states, `MambaSpec.num_speculative_blocks`): the first allocation takes them
with the state, and when a later chunk moves the state on, the speculative blocks the new state
position passes are moved to the end of the table (their old places become null), so they stay
the last `num_speculative_blocks` entries. The previous state is then released by index
(`last_state_block_idx`) once the tokens after it are processed.

One difference between releases (`impl.behaviour`): 0.32 re-marks the prompt's last reusable
state (the block ending at the last block boundary before the prompt's final token) as cached
*this step* every time the request's cache call lands on that boundary, which keeps other
requests from hitting it in that step; 0.33 skips a block already keyed there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.behaviour import DEFAULT_BEHAVIOUR
from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool
from impl.core.mamba import MambaManager
from impl.core.mamba_boundaries import BoundaryState
from impl.core.mamba_prompt_tail import cache_prompt_tail_state, remark_prompt_boundary
from impl.core.single_type_manager import cdiv
from impl.core.specs import KVCacheSpec, MambaSpec
from vtwin.errors import IntegrityError

if TYPE_CHECKING:
    from impl.sched.request import Request


class MambaAlignManager(MambaManager):
    ignores_lookahead = True

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, enable_caching: bool,
                 kv_cache_group_id: int) -> None:
        super().__init__(kv_cache_spec, block_pool, enable_caching, kv_cache_group_id)
        # Blocks [0, n) of the request were already retired (freed or null).
        self.num_retired_blocks: dict[str, int] = {}
        # 0.32: re-mark the prompt-boundary state on every cache call that lands on it. The
        # scheduler sets it from its `Behaviour`; a manager built alone follows the default.
        self.remarks_prompt_boundary = not DEFAULT_BEHAVIOUR.mamba_align_skips_keyed_boundary
        # Requests that have been given blocks once: a partial tail of theirs is a state they
        # keep writing into, so its copy-on-write moves the cache entry, not the table entry.
        self.allocated: set[str] = set()
        # Where each request's previous state lies, freed once processed past it.
        self.last_state_block_idx: dict[str, int] = {}
        # States cached since the scheduler last took them, for a KV connector to store
        # (`take_boundary_states`); recorded only when the scheduler has one.
        self.offers_boundary_states = False
        self.boundary_states: list[BoundaryState] = []
        # Requests whose own prompt-tail state is keyed inside a block (a partial tail they
        # produced): its block and boundary. The copy-on-write that preserves it is offered
        # to a KV connector (`_copy_partial_state`).
        self.producer_tails: dict[str, tuple[KVCacheBlock, int]] = {}
        # The engine's `enable_mamba_shared_prefix_checkpoint`, where it takes effect
        # (`impl.sched.manager_rules.takes_junction_checkpoints`): a prompt chunk ending at the
        # request's shared-prefix junction keys its state there too, inside a block or not.
        self.junction_checkpoints = False

    @property
    def num_speculative_blocks(self) -> int:
        spec = self.kv_cache_spec
        assert isinstance(spec, MambaSpec)
        return spec.num_speculative_blocks

    def get_num_blocks_to_allocate(
        self,
        request_id: str,
        num_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock],
        total_computed_tokens: int,
        apply_admission_cap: bool,
    ) -> int:
        """At most one new state block per call, whatever the chunk length (the gap before it
        is null); fewer than none when the table is already longer than needed."""
        if new_computed_blocks and new_computed_blocks[-1].block_hash in self.cached_this_step:
            return self.block_pool.num_gpu_blocks + 1  # refused this step (see MambaManager)
        held = self.req_to_blocks.get(request_id)
        num_speculative = self.num_speculative_blocks
        num_new = (cdiv(num_tokens, self.block_size) + num_speculative
                   - len(new_computed_blocks) - (len(held) if held is not None else 0))
        num_evictable = 0
        for block in new_computed_blocks:
            if block.ref_cnt == 0 and not block.is_null:
                num_evictable += 1
        # One state block (and the drafts' on the first allocation) per call, at most.
        cap = 1 if request_id in self.allocated else 1 + num_speculative
        if (self.has_partial_hit(new_computed_blocks, total_computed_tokens)
                or request_id in self.partial_hit_reqs):
            return min(max(num_new, 0) + 1, cap + 1) + num_evictable  # and the state's copy
        return min(num_new, cap) + num_evictable

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Null blocks up to the chunk's last block, then one real block for the state there;
        the new table entries (nulls included) are what the step reports as new. A pending
        partial tail takes its copy first (`impl.core.partial_hits`)."""
        blocks = self.req_to_blocks.setdefault(request_id, [])
        num_speculative = self.num_speculative_blocks
        num_required = cdiv(num_tokens, self.block_size) + num_speculative
        num_held = len(blocks)
        partial = self.partial_hit_reqs.pop(request_id, None)
        if num_required <= num_held and partial is None:
            self.allocated.add(request_id)
            return []
        allocated = request_id in self.allocated
        if allocated:  # the running state sits before the drafts' blocks
            self.last_state_block_idx[request_id] = num_held - 1 - num_speculative
        elif num_held:  # a prefix hit's state
            self.last_state_block_idx[request_id] = num_held - 1
        num_skipped = num_required - num_speculative - 1
        if num_held < num_skipped:
            blocks.extend([self.null_block] * (num_skipped - num_held))
        if allocated:  # the drafts' blocks the new state passes move to the end
            for index in range(num_held - num_speculative, num_held):
                if index >= num_skipped:
                    break
                blocks.append(blocks[index])
                blocks[index] = self.null_block
        num_new = max(num_required - len(blocks), 0)
        new_blocks = self.block_pool.get_new_blocks(num_new + (partial is not None))
        added = blocks[num_held:]
        if partial is not None:
            copy = new_blocks.pop(0)
            if self._copy_partial_state(request_id, partial, copy):
                added.insert(0, copy)
        blocks.extend(new_blocks)
        self.allocated.add(request_id)
        return added + new_blocks

    def _copy_partial_state(self, request_id: str, partial: tuple[int, KVCacheBlock],
                            copy: KVCacheBlock) -> bool:
        """Copy-on-write of a partial state; True when `copy` took the table entry.

        A new request's hit state is swapped for the copy in its table (as for full
        attention). A running request keeps writing into its own block, so the cache entry
        moves to the copy instead, which nobody holds once the step's output carries it."""
        if request_id not in self.allocated:
            self.swap_in_copy(request_id, partial, copy)
            return True
        source = partial[1]
        self.pending_copies.append((source, copy))
        self.block_pool.move_block_hashes(source, copy)
        source.ref_cnt += 1
        tail = self.producer_tails.pop(request_id, None)
        if tail is not None and self.offers_boundary_states:
            # The copy keeps the request's own partial tail once this step's copy has run:
            # a connector may store it from there (the request overwrites its block).
            self.boundary_states.append(BoundaryState(
                request_id, self.kv_cache_group_id, copy.block_id, tail[1]))
        if copy.block_hash is not None:
            self.cached_this_step.add(copy.block_hash)  # written by this step's copy only
        return False

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int,
                              num_prompt_tokens: int) -> None:
        """Retire every block left of the last processed token's block, tail first, skipping
        the null gaps (no early stop at the first null, unlike the window types)."""
        blocks = self.req_to_blocks.get(request_id)
        if not blocks:
            return
        end = min(self.get_num_skipped_tokens(num_computed_tokens) // self.block_size,
                  len(blocks))
        start = self.num_retired_blocks.get(request_id, 0)
        if start < end:
            removed: list[KVCacheBlock] = []
            for index in range(end - 1, start - 1, -1):
                block = blocks[index]
                if not block.is_null:
                    removed.append(block)
                    blocks[index] = self.null_block
            self.block_pool.free_blocks(removed)
            self.num_retired_blocks[request_id] = end
        self._free_last_state(request_id, num_computed_tokens)

    def _free_last_state(self, request_id: str, num_computed_tokens: int) -> None:
        """The previous state, once the tokens after it are processed (by index: with drafts'
        blocks behind it, it is not always left of the retired prefix)."""
        index = self.last_state_block_idx.get(request_id)
        if index is None or index >= cdiv(num_computed_tokens, self.block_size) - 1:
            return
        blocks = self.req_to_blocks[request_id]
        if not blocks[index].is_null:
            self.block_pool.free_blocks([blocks[index]])
            blocks[index] = self.null_block

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        request_id = request.request_id
        num_before = self.num_cached_block.get(request_id, 0)
        super().cache_blocks(request, block_hashes, num_tokens)
        num_after = self.num_cached_block.get(request_id, 0)
        # With sub-block hits on (hashes finer than the block, or under DCP as fine as it)
        # the prompt's tail is keyed at the hash block, which the retention mask's scheduler-
        # block boundaries may not cover; from 0.33 (no re-mark) whatever the hash block: the
        # hashes of a chain of MTP modules cover tokens past their block, so a resend's hit
        # ends a block below the replay boundary sparse retention keeps.
        if self.hash_block_size < self.block_size or self.partial_hits \
                or not self.remarks_prompt_boundary:
            cache_prompt_tail_state(self, request, num_tokens, self.remarks_prompt_boundary,
                                    self.producer_tails, self.junction_checkpoints)
        elif self.remarks_prompt_boundary:
            remark_prompt_boundary(self, request, block_hashes, num_tokens)
        if self.offers_boundary_states:  # (a whole-block tail keyed just now included)
            self._offer_boundary_states(request_id, num_before, num_after)

    def _offer_boundary_states(self, request_id: str, num_before: int, num_after: int) -> None:
        """Offer each state this call keyed (blocks `num_before` to `num_after`; null and
        unkept ones skipped), with the token boundary it ends: a table that nulls and
        relocates its entries cannot be read by position, so a connector stores these blocks,
        never the table's."""
        blocks = self.req_to_blocks[request_id]
        for index in range(num_before, num_after):
            block = blocks[index]
            if not block.is_null and block.block_hash is not None:
                self.boundary_states.append(BoundaryState(
                    request_id, self.kv_cache_group_id, block.block_id,
                    (index + 1) * self.block_size))

    def take_boundary_states(self) -> list[BoundaryState]:
        """The states offered since the last call (`_offer_boundary_states`)."""
        taken, self.boundary_states = self.boundary_states, []
        return taken

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        # Its blocks go back to the pool now: an offer not taken yet could name a block
        # handed to another request before a connector reads it.
        if self.boundary_states:
            self.boundary_states = [s for s in self.boundary_states
                                    if s.request_id != request_id]
        self.num_retired_blocks.pop(request_id, None)
        self.last_state_block_idx.pop(request_id, None)
        self.producer_tails.pop(request_id, None)
        self.allocated.discard(request_id)
        return super().pop_blocks_for_free(request_id)

    def check_integrity(self) -> None:
        """Besides the common checks: the retired prefix of a live table is all null."""
        super().check_integrity()
        for request_id, num in self.num_retired_blocks.items():
            blocks = self.req_to_blocks.get(request_id)
            if blocks is None or num > len(blocks) or not all(b.is_null for b in blocks[:num]):
                raise IntegrityError(f"group {self.kv_cache_group_id}: {request_id} retired "
                                     f"{num} blocks that are not all null")
        for request_id, (block, boundary) in self.producer_tails.items():
            pending = self.partial_hit_reqs.get(request_id)
            if pending is None or pending[1] is not block or boundary % self.block_size == 0:
                raise IntegrityError(f"group {self.kv_cache_group_id}: {request_id}'s partial "
                                     f"tail at {boundary} tokens (block {block.block_id}) has "
                                     "no copy-on-write pending")
