"""Block-aligned prefill chunks for mamba's 'align' cache mode.

A mamba state is a running summary: the model writes it where a chunk ends. In 'align' mode
(`impl.core.mamba_align`) only states at block boundaries are kept and indexed, so prefill
chunks must end on block boundaries, except the chunk that finishes the prefill (decode moves
its state on to the next boundary). `MambaAlignedSplit.clip` shortens a chunk, in order:

| rule                      | the chunk [start, end) ends at                                   |
| ------------------------- | ---------------------------------------------------------------- |
| not prefilling            | unchanged (start at or past the prefill end)                     |
| mid-prefill               | end rounded down to a block boundary, unless that leaves nothing |
|                           | and a whole block would fit the per-chunk cap (then it waits)    |
| then the earliest of these strictly inside (start, end):                                     |
| started mid-block         | the next block boundary                                          |
| last cacheable state      | the last boundary before the request's final token (with EAGLE: |
|                           | one block below the last boundary at or before it)               |
| shared-prefix junction    | the junction, block-floored from start (`shared_prefix_boundary`)|
|                           | or, with junction checkpoints on, the junction itself when it    |
|                           | lies within the prompt                                           |
| prompt's last hash bound. | with sub-block hits (`impl.core.partial_hits`): the last hash    |
|                           | boundary before the prompt's final token (EAGLE: one hash block  |
|                           | below the last one at or before it), when inside a block         |

Why EAGLE moves the last two stops: its hits give up their last block (the head wrote the next
prompt token's KV there), so a full-attention hit ends one block short of the last boundary;
the mamba state a hit needs is the one at that shorter boundary, and a chunk must end there
for the state to be written. The drop itself leaves tokens to recompute, so the boundary may
be the request's last token (`checkpoint_boundary`).

Prefill ends at max(prompt, tokens - 1): a resumed request replays its output tokens as
prefill. A clip to 0 tokens skips a running request this step and stops admission. A chunk
starts mid-block after sub-block chunks (a block wider than the chunk cap, or a 1-token
long-prefill cap while requests compete); its next stop realigns it.
"""

from __future__ import annotations

from dataclasses import dataclass

from impl.core.kv_cache_manager import KVCacheManager
from impl.core.mamba_boundaries import checkpoint_boundary
from impl.core.specs import KVCacheConfig, MambaSpec
from impl.sched.config import SchedulerConfig
from impl.sched.manager_rules import takes_junction_checkpoints
from impl.sched.request import Request


@dataclass(frozen=True, slots=True)
class MambaAlignedSplit:
    block_size: int
    # The most tokens one prefill chunk may take: the step budget, or the long-prefill cap.
    max_chunk_tokens: int
    # With sub-block hits, the hash block (a chunk also stops at the prompt's last hash
    # boundary, so its state can be keyed there); 0 without.
    tail_hash_block: int = 0
    # EAGLE's hits give up their last block (`SchedulerConfig.use_eagle_block_drop`).
    eagle_block_drop: bool = False
    # Tokens past each block its hash covers (`SchedulerConfig.num_hash_lookahead_tokens`).
    hash_lookahead: int = 0
    # The engine's `enable_mamba_shared_prefix_checkpoint`, where it takes effect
    # (`manager_rules.takes_junction_checkpoints`): stop at the junction itself, whose state
    # the manager then keys, instead of the block boundary below it.
    exact_junction: bool = False

    @classmethod
    def setup(cls, config: SchedulerConfig, kv_cache_config: KVCacheConfig,
              kv_cache_manager: KVCacheManager) -> MambaAlignedSplit | None:
        """The split for a config with a mamba group in 'align' mode (None: no split)."""
        if not any(isinstance(g.kv_cache_spec, MambaSpec)
                   and g.kv_cache_spec.mamba_cache_mode == "align"
                   for g in kv_cache_config.kv_cache_groups):
            return None
        max_chunk = config.max_num_batched_tokens
        if config.long_prefill_token_threshold > 0:
            max_chunk = min(max_chunk, config.long_prefill_token_threshold)
        sub_block = kv_cache_manager.coordinator.sub_block_hits
        return cls(config.block_size, max_chunk,
                   config.effective_hash_block_size if sub_block else 0,
                   config.use_eagle_block_drop, config.num_hash_lookahead_tokens,
                   takes_junction_checkpoints(kv_cache_manager,
                                              config.enable_mamba_shared_prefix_checkpoint))

    def clip(self, request: Request, num_new_tokens: int, num_new_computed_tokens: int = 0) -> int:
        """The chunk length for `num_new_tokens` proposed after the request's computed tokens
        plus `num_new_computed_tokens` (prefix hits found at admission)."""
        start = request.num_computed_tokens + num_new_computed_tokens
        prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
        if start >= prefill_end:
            return num_new_tokens
        block_size = self.block_size
        end = start + num_new_tokens
        if end < prefill_end:
            aligned_end = end // block_size * block_size
            if aligned_end > start or block_size <= self.max_chunk_tokens:
                end = aligned_end
        eagle = self.eagle_block_drop
        last_cacheable = checkpoint_boundary(request.num_tokens, block_size, eagle,
                                             self.hash_lookahead)
        junction = request.shared_prefix_boundary
        tail = 0
        if self.tail_hash_block:
            tail = checkpoint_boundary(request.num_prompt_tokens, self.tail_hash_block, eagle,
                                       self.hash_lookahead)
            if not last_cacheable < tail < request.num_prompt_tokens:
                tail = 0
        if self.exact_junction and junction <= request.num_prompt_tokens:
            junction_stop = junction
        else:  # a sub-block state would not be kept: the block boundary below it
            junction_stop = start + (junction - start) // block_size * block_size
        stops = (
            (start // block_size + 1) * block_size if start % block_size else 0,
            last_cacheable,
            tail,
            junction_stop if start < junction < end else 0,
        )
        end = min((stop for stop in stops if start < stop < end), default=end)
        return max(end - start, 0)

