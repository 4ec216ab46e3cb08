"""Where a mamba state sits, by token count: the boundary a later hit can resume from
(`checkpoint_boundary`), and the states the cache keyed that a KV connector stores
(`BoundaryState`).

A mamba state summarises every token before it, so a hit on it resumes exactly at the
boundary it ends; a chunk must end there for the model to write it (`impl.sched.mamba_split`),
and the cache keys it there (`impl.core.mamba_align`).
"""

from __future__ import annotations

from dataclasses import dataclass


def checkpoint_boundary(num_tokens: int, unit: int, eagle_block_drop: bool,
                        hash_lookahead: int = 0) -> int:
    """The last multiple of `unit` whose state a later hit on these `num_tokens` can resume
    from: below the final token (a hit must leave one to recompute), or, when EAGLE's hits give
    up their last block (which leaves tokens to recompute anyway), one unit below the last
    multiple at or before the end: the full-attention hit ends there, so the mamba state that
    matches it is the one kept (and the one the scheduler ends a chunk at). With hashes that
    also cover `hash_lookahead` tokens past their block (0.33's EAGLE family), the boundary's
    hash needs those tokens: it lies that many tokens below the end at least."""
    if eagle_block_drop:
        return max((num_tokens // unit - 1) * unit, 0)
    return max(num_tokens - max(1, hash_lookahead), 0) // unit * unit


@dataclass(frozen=True, slots=True)
class BoundaryState:
    """A mamba state the cache keyed: whose, which group and block, and the token count it
    ends (the boundary a later hit would load it at)."""

    request_id: str
    group: int
    block_id: int
    boundary: int
