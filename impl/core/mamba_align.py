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
from impl.core.single_type_manager import cdiv
from impl.core.specs import KVCacheSpec
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
        num_new = (cdiv(num_tokens, self.block_size) - len(new_computed_blocks)
                   - (len(held) if held is not None else 0))
        num_evictable = 0
        for block in new_computed_blocks:
            if block.ref_cnt == 0 and not block.is_null:
                num_evictable += 1
        return min(num_new, 1) + num_evictable

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Null blocks up to the chunk's last block, then one real block for the state there;
        the new table entries (nulls included) are what the step reports as new."""
        blocks = self.req_to_blocks.setdefault(request_id, [])
        num_required = cdiv(num_tokens, self.block_size)
        num_held = len(blocks)
        if num_required <= num_held:
            return []
        if num_held < num_required - 1:
            blocks.extend([self.null_block] * (num_required - 1 - num_held))
        blocks.extend(self.block_pool.get_new_blocks(1))
        return blocks[num_held:]

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
        if start >= end:
            return
        removed: list[KVCacheBlock] = []
        for index in range(end - 1, start - 1, -1):
            block = blocks[index]
            if not block.is_null:
                removed.append(block)
                blocks[index] = self.null_block
        self.block_pool.free_blocks(removed)
        self.num_retired_blocks[request_id] = end

    def cache_blocks(self, request: Request, block_hashes: Sequence[BlockHash],
                     num_tokens: int) -> None:
        super().cache_blocks(request, block_hashes, num_tokens)
        if self.remarks_prompt_boundary:
            self._remark_prompt_boundary(request, block_hashes, num_tokens)

    def _remark_prompt_boundary(self, request: Request, block_hashes: Sequence[BlockHash],
                                num_tokens: int) -> None:
        """0.32: a cache call reaching exactly the prompt's last reusable boundary (the last
        block boundary before its final token) marks that state cached this step again, even
        when it was keyed in an earlier step or came from a prefix hit."""
        block_size = self.block_size
        boundary = (request.num_prompt_tokens - 1) // block_size * block_size
        if num_tokens <= 0 or num_tokens != boundary:
            return
        index = num_tokens // block_size - 1
        blocks = self.req_to_blocks.get(request.request_id, [])
        if index < len(blocks) and not blocks[index].is_null \
                and blocks[index].block_hash == block_hashes[index]:
            self.cached_this_step.add(block_hashes[index])

    def free(self, request_id: str) -> None:
        self.num_retired_blocks.pop(request_id, None)
        super().free(request_id)

    def check_integrity(self) -> None:
        """Besides the common checks: the retired prefix of a live table is all null."""
        super().check_integrity()
        for request_id, num in self.num_retired_blocks.items():
            blocks = self.req_to_blocks.get(request_id)
            if blocks is None or num > len(blocks) or not all(b.is_null for b in blocks[:num]):
                raise IntegrityError(f"group {self.kv_cache_group_id}: {request_id} retired "
                                     f"{num} blocks that are not all null")
