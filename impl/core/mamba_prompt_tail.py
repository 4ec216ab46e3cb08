"""Where a mamba 'align' request's prompt tail is keyed: the last state a resend can hit.

A resend of a prompt resumes from the last state before its final token (`checkpoint_boundary`).
With hashes finer than the block that state usually ends inside a block: it is keyed there as
a partial entry, the request that produced it is remembered (`producer_tails`: its copy-on-write
is offered to a KV connector), and its next step copies it before overwriting it
(`cache_prompt_tail_state`). With hashes at the block, 0.32 marks the prompt's last whole-block
state cached this step again each time a cache call lands on it (`remark_prompt_boundary`).

The engine's `enable_mamba_shared_prefix_checkpoint` adds one more such state: the request's
shared-prefix junction (where a sibling's hit in another group ran past mamba's, the Marconi
idea), when a prompt chunk ends there. A third request sharing that prefix then finds a state
at the junction instead of recomputing from the last block boundary below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.core.block import BlockHash
from impl.core.mamba_boundaries import checkpoint_boundary
from impl.core.single_type_manager import cdiv

if TYPE_CHECKING:
    from impl.core.block import KVCacheBlock
    from impl.core.mamba import MambaManager
    from impl.sched.request import Request


def cache_prompt_tail_state(manager: MambaManager, request: Request, num_tokens: int,
                            remarks: bool,
                            producer_tails: dict[str, tuple[KVCacheBlock, int]],
                            junctions: bool = False) -> None:
    """Hashes finer than the block: a cache call landing on the prompt's last hash
    boundary (before its final token; `checkpoint_boundary`) keys the state there.

    Inside a block, the state is only findable through this entry, and the request's next
    step would overwrite it, so that step copies it first
    (`MambaAlignManager._copy_partial_state`; `producer_tails` remembers the request). On a
    block boundary, 0.32 (`remarks`) marks the already keyed state cached this step again
    (as `remark_prompt_boundary`), and a state sparse retention left unkeyed (EAGLE's replay
    boundaries lie a scheduler block below the end, this one a hash block below) is keyed
    here, whole, with nothing to copy. `junctions`: a call ending a prompt chunk at the
    request's shared-prefix junction keys the state there the same way."""
    hbs = manager.hash_block_size
    if num_tokens <= 0:
        return
    if num_tokens != checkpoint_boundary(request.num_prompt_tokens, hbs, manager.use_eagle,
                                         manager.hash_lookahead) and not (
            junctions and num_tokens == request.shared_prefix_boundary
            and request.num_computed_tokens < num_tokens <= request.num_prompt_tokens):
        return
    index = cdiv(num_tokens, manager.block_size) - 1
    blocks = manager.req_to_blocks.get(request.request_id, [])
    if index >= len(blocks) or blocks[index].is_null:
        return
    source = blocks[index]
    tail_hash = request.block_hashes[num_tokens // hbs - 1]
    keyed = source.block_hash == tail_hash or (
        source.extra_hashes is not None and tail_hash in source.extra_hashes)
    if keyed and not remarks:
        return
    aligned = num_tokens % manager.block_size == 0
    if aligned and keyed:
        manager.cached_this_step.add(tail_hash)
        return
    manager.block_pool.cache_partial_block(
        source, tail_hash, manager.kv_cache_group_id, num_tokens,
        parent_hash=request.block_hashes[num_tokens // hbs - 2] if num_tokens > hbs
        else None,
        token_ids=request.prompt_token_ids[num_tokens - hbs:num_tokens],
        lora_name=request.lora_name)
    manager.cached_this_step.add(tail_hash)
    if aligned:
        return  # a whole block sparse retention left unkeyed: keyed, nothing to copy
    manager.partial_hit_reqs[request.request_id] = (index, source)
    manager.num_cached_block[request.request_id] = index
    producer_tails[request.request_id] = (source, num_tokens)

def remark_prompt_boundary(manager: MambaManager, request: Request,
                           block_hashes: Sequence[BlockHash], num_tokens: int) -> None:
    """0.32: a cache call reaching exactly the prompt's last reusable boundary (the last
    block boundary before its final token; `checkpoint_boundary`) marks that state cached
    this step again, even when it was keyed in an earlier step or came from a prefix
    hit."""
    block_size = manager.block_size
    boundary = checkpoint_boundary(request.num_prompt_tokens, block_size, manager.use_eagle)
    if num_tokens <= 0 or num_tokens != boundary:
        return
    index = num_tokens // block_size - 1
    blocks = manager.req_to_blocks.get(request.request_id, [])
    if index < len(blocks) and not blocks[index].is_null \
            and blocks[index].block_hash == block_hashes[index]:
        manager.cached_this_step.add(block_hashes[index])
