"""Prefix-cache statistics as the engine's metrics read them: lookups, hits, and for a KV
connector the tier each externally cached token came from.

The scheduler keeps two of these: the local prefix cache's (`KVCacheManager`) and, beside a
connector, the connector's (`Scheduler.connector_prefix_cache_stats`: what vLLM exports as the
external prefix-cache queries and hits, and the hits split by source). Both are handed out and
started afresh each time the scheduler makes its stats. A request admitted after a preemption is
counted apart, and its hits are never split by source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class CacheHitSource(StrEnum):
    """Where a cached prompt token's KV came from, in the order blocks are offloaded (the
    accelerator, host memory, a peer, a disk), then a source nobody named (a connector that does
    not say). The values are the metric's labels."""

    DEVICE = "device"
    HOST = "host"
    P2P = "p2p"
    DISK = "disk"
    EXTERNAL_UNSPECIFIED = "external_unspecified"


def single_source(source: CacheHitSource, num_tokens: int) -> dict[CacheHitSource, int]:
    """All of a hit from one tier (a connector with one tier): empty for no tokens."""
    return {source: num_tokens} if num_tokens else {}


@dataclass(slots=True)
class PrefixCacheStats:
    """Lookups since the stats were last made (preempted requests counted apart)."""

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    hits_by_source: dict[CacheHitSource, int] = field(default_factory=dict)

    def record(self, num_tokens: int, num_hits: int, preempted: bool,
               hits_by_source: dict[CacheHitSource, int] | None = None) -> None:
        """Count one lookup. A split that does not add up to `num_hits` is not trusted: the
        hits are then all `external_unspecified` (upstream logs a warning and does the same)."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
            return
        self.requests += 1
        self.queries += num_tokens
        self.hits += num_hits
        if hits_by_source is None:
            return
        if sum(hits_by_source.values()) != num_hits:
            hits_by_source = {CacheHitSource.EXTERNAL_UNSPECIFIED: num_hits}
        for source, count in hits_by_source.items():
            if count:
                self.hits_by_source[source] = self.hits_by_source.get(source, 0) + count
