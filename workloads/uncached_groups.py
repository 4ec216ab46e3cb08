"""KV-cache groups that keep no prefix cache: what a workload may ask for.

A bounded-replay sliding window (DeepSeek-V4.1 style) rebuilds a prefix hit found by the other
groups by recomputing the hit's last window (the twin's `impl.sched.replay`); the engine has
one replay window, so every such group must agree. A circular buffer is one block per request
used as a ring (`impl.core.circular_buffer`). Either needs a group beside it that keeps a
prefix cache (upstream's hybrid search needs one), and neither is modelled with a connector.
"""

from __future__ import annotations

from collections.abc import Callable

from workloads.errors import WorkloadError
from workloads.schema import EngineConfigModel


def check_uncached_groups(model: EngineConfigModel,
                          fail: Callable[[str, str], WorkloadError]) -> None:
    """Refuse, naming the field, what the groups without a prefix cache do not support."""
    uncached = [g for g in model.kv_cache_groups
                if g.bounded_replay or g.type == "circular_buffer"]
    if not uncached:
        return
    replayed = [g for g in uncached if g.bounded_replay]
    windows = sorted({g.sliding_window or 0 for g in replayed})
    if len(windows) > 1:
        raise fail("kv_cache_groups", f"bounded_replay groups must share one sliding_window "
                   f"(the engine replays one window; got {windows})")
    what = "bounded_replay" if replayed else "a circular_buffer group"
    if len(uncached) == len(model.kv_cache_groups):
        raise fail("kv_cache_groups", f"{what} needs a group that keeps a prefix cache "
                   "(e.g. a full-attention group) beside it")
    if model.kv_connector is not None:
        raise fail("kv_connector", f"{what} with a KV connector is not modelled yet" + (
            " (a load that carries the window replays nothing)" if replayed else ""))
