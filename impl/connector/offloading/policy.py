"""What a replacement policy does for the manager, and the prefix order both policies use.

The manager owns the slots and the reference counts; a policy owns where each chunk stands in
its replacement order, and picks victims. It is told when a chunk becomes evictable (no
reader, store complete) and when it stops being so, when a store misses, when a request first
sees a chunk, and, once per request, everything the request touched, in prefix order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from impl.connector.offloading.chunks import Chunk
from impl.connector.offloading.keys import OffloadKey, RequestContext


class CachePolicy(Protocol):
    def get(self, key: OffloadKey) -> Chunk | None: ...

    def insert(self, key: OffloadKey, chunk: Chunk, context: RequestContext) -> None: ...

    def remove(self, key: OffloadKey) -> None: ...

    def touch(self, keys: Sequence[OffloadKey]) -> None: ...

    def on_store_miss(self, keys: Sequence[OffloadKey]) -> None: ...

    def on_request_access(self, keys: Sequence[OffloadKey], context: RequestContext) -> None:
        ...

    def on_request_finished(self, groups: Sequence[Sequence[OffloadKey]],
                            inserted_only: set[OffloadKey], reused: set[OffloadKey],
                            context: RequestContext) -> None: ...

    def evict(self, count: int,
              protected: set[OffloadKey]) -> list[tuple[OffloadKey, Chunk]] | None:
        """Exactly `count` evictable chunks outside `protected`, removed, in eviction order;
        None, changing nothing, when there are fewer."""
        ...

    def mark_evictable(self, key: OffloadKey) -> None: ...

    def mark_non_evictable(self, key: OffloadKey) -> None: ...

    def clear(self) -> None: ...

    def cached_keys(self) -> Iterable[OffloadKey]: ...

    def check_integrity(self) -> None: ...


def in_prefix_order(keys: list[OffloadKey], context: RequestContext) -> list[OffloadKey]:
    """`keys` sorted by the token position each ends at, ties kept in the given order; as
    given when any key has no known position (the order they were seen in stands)."""
    positions = context.positions
    if all(key in positions for key in keys):
        return sorted(keys, key=positions.__getitem__)
    return keys


def request_prefix_order(groups: Sequence[Sequence[OffloadKey]],
                         context: RequestContext) -> list[OffloadKey]:
    """Every group's keys as one head-to-tail sequence (see `in_prefix_order`)."""
    return in_prefix_order([key for group in groups for key in group], context)
