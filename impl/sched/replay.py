"""Bounded replay of sliding windows (DeepSeek-V4.1): how a prefix hit is rebuilt without cache.

A sliding-window group declared `bounded_replay` keeps no prefix cache of its own: its blocks
are private to the request. A hit found in the other groups therefore cannot be taken as is;
the window's KV for the hit's next token is missing. The scheduler rebuilds it by recomputing
the hit's last window ("replay"): the request starts `window` tokens before the end of its hit,
but keeps every hit block (the full-attention KV of the replayed tokens is already there and is
not rewritten), so the slots it allocates are those past the hit only.

    hit (adopted blocks)  |..........................H|
    replayed                              |--window--|      replay_start = H - window
    num_computed_tokens after admission   = H - window

A hit no longer than the window saves nothing (all of it would be recomputed), so it is
dropped: the request starts from token 0 with no hit blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.core.specs import KVCacheConfig

if TYPE_CHECKING:
    from impl.sched.request import Request


def prefix_replay_window(kv_cache_config: KVCacheConfig) -> int:
    """The engine's replay window: the window of its bounded-replay groups (one for all, so the
    rewind fits every such group's allocation), 0 when there are none."""
    windows = {group.kv_cache_spec.prefix_replay_tokens
               for group in kv_cache_config.kv_cache_groups}
    windows.discard(0)
    if len(windows) > 1:
        raise ValueError(f"kv_cache_groups: bounded-replay groups must share one window "
                         f"(got {sorted(windows)})")
    return windows.pop() if windows else 0


def hit_worth_replaying(num_hit_tokens: int, window: int) -> bool:
    """False for a hit the replay would recompute in full (no longer than the window)."""
    return not 0 < num_hit_tokens <= window


def mark_prefix_replay(request: Request, num_hit_tokens: int, window: int) -> int:
    """Record where the hit's replay starts and return how many hit tokens are recomputed (the
    caller rewinds the request's computed count by that)."""
    num_replay_tokens = min(window, num_hit_tokens)
    request.replay_start = num_hit_tokens - num_replay_tokens
    return num_replay_tokens
