"""Bounded replay of sliding windows (DeepSeek-V4.1 style): what a workload may ask for.

A `bounded_replay` sliding-window group keeps no prefix cache; after a hit in the other groups
the scheduler recomputes the hit's last window so the group's KV is rebuilt (the twin's
`impl.sched.replay`). The engine has one replay window, so every such group must agree."""

from __future__ import annotations

from collections.abc import Callable

from workloads.errors import WorkloadError
from workloads.schema import EngineConfigModel


def check_bounded_replay(model: EngineConfigModel,
                         fail: Callable[[str, str], WorkloadError]) -> None:
    """Bounded-replay sliding windows: one replay window for the engine (the scheduler rewinds
    every such group by it), beside at least one group that keeps a prefix cache, and no
    connector (a connector's load that carries the window is not modelled)."""
    replayed = [g for g in model.kv_cache_groups if g.bounded_replay]
    if not replayed:
        return
    windows = sorted({g.sliding_window or 0 for g in replayed})
    if len(windows) > 1:
        raise fail("kv_cache_groups", f"bounded_replay groups must share one sliding_window "
                   f"(the engine replays one window; got {windows})")
    if len(replayed) == len(model.kv_cache_groups):
        raise fail("kv_cache_groups", "bounded_replay needs a group that keeps a prefix cache "
                   "(e.g. a full-attention group) beside it")
    if model.kv_connector is not None:
        raise fail("kv_connector", "bounded_replay with a KV connector is not modelled yet "
                   "(a load that carries the window replays nothing)")
