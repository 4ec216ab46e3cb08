"""Adaptive replacement (ARC): a recency list, a frequency list, and ghosts of both.

`recent` (T1) holds chunks used once, `frequent` (T2) chunks reused since; each is ordered
least recent first. Evicting from one leaves the key in its ghost list (B1, B2), up to the
cache's capacity each. A store that misses on a ghost tells the policy which list it evicted
from too early: a B1 ghost raises `target_recent` (the share T1 may keep), a B2 ghost lowers
it, each by the ratio of the ghost lists' sizes (at least 1). Eviction takes from T1 while T1
holds at least its target, else from T2, and from the other list when one has no idle chunk
outside the protected keys.

A reuse moves a chunk from T1 to T2 (or to T2's recent end): a touch of a readable chunk, and
at the end of a request each chunk it read while ready. Chunks a request only inserted keep
their list and move to its recent end. New chunks always enter T1 and leave the ghosts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

from impl.connector.offloading.chunks import Chunk
from impl.connector.offloading.keys import OffloadKey, RequestContext
from impl.connector.offloading.policy import request_prefix_order
from vtwin.errors import require


def next_idle(entries: Iterator[tuple[OffloadKey, Chunk]],
              protected: set[OffloadKey]) -> tuple[OffloadKey, Chunk] | None:
    """The next idle (readable, unread) chunk outside `protected` along a list's scan."""
    for key, chunk in entries:
        if chunk.ref_cnt == 0 and key not in protected:
            return key, chunk
    return None


class ARCPolicy:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target_recent = 0.0
        self.recent: OrderedDict[OffloadKey, Chunk] = OrderedDict()
        self.frequent: OrderedDict[OffloadKey, Chunk] = OrderedDict()
        self.recent_ghosts: OrderedDict[OffloadKey, None] = OrderedDict()
        self.frequent_ghosts: OrderedDict[OffloadKey, None] = OrderedDict()

    def get(self, key: OffloadKey) -> Chunk | None:
        chunk = self.recent.get(key)
        return chunk if chunk is not None else self.frequent.get(key)

    def cached_keys(self) -> Iterable[OffloadKey]:
        return [*self.recent, *self.frequent]

    def insert(self, key: OffloadKey, chunk: Chunk, context: RequestContext) -> None:
        self.recent[key] = chunk
        self.recent_ghosts.pop(key, None)
        self.frequent_ghosts.pop(key, None)

    def remove(self, key: OffloadKey) -> None:
        """A chunk whose store failed. Usually in T1; in T2 when the request that stores it
        again had read it earlier and finished before the store completed."""
        if self.recent.pop(key, None) is None:
            self.frequent.pop(key, None)

    def _learn_from_ghost(self, key: OffloadKey) -> None:
        if key in self.recent_ghosts:
            step = max(1, len(self.frequent_ghosts) / len(self.recent_ghosts))
            self.target_recent = min(self.target_recent + step, self.capacity)
            self.recent_ghosts.move_to_end(key)
        elif key in self.frequent_ghosts:
            step = max(1, len(self.recent_ghosts) / len(self.frequent_ghosts))
            self.target_recent = max(self.target_recent - step, 0)
            self.frequent_ghosts.move_to_end(key)

    def on_store_miss(self, keys: Sequence[OffloadKey]) -> None:
        for key in reversed(keys):
            self._learn_from_ghost(key)

    def touch(self, keys: Sequence[OffloadKey]) -> None:
        for key in reversed(keys):
            chunk = self.recent.pop(key, None)
            if chunk is not None:
                # a chunk still being written was stored, not reused: it stays in T1
                (self.frequent if chunk.is_ready else self.recent)[key] = chunk
            elif key in self.frequent:
                self.frequent.move_to_end(key)
            else:
                self._learn_from_ghost(key)

    def on_request_access(self, keys: Sequence[OffloadKey], context: RequestContext) -> None:
        return

    def on_request_finished(self, groups: Sequence[Sequence[OffloadKey]],
                            inserted_only: set[OffloadKey], reused: set[OffloadKey],
                            context: RequestContext) -> None:
        for key in reversed(request_prefix_order(groups, context)):
            if key in inserted_only:
                for entries in (self.recent, self.frequent):
                    if key in entries:
                        entries.move_to_end(key)
                        break
            elif key in reused:
                if key in self.recent:
                    self.frequent[key] = self.recent.pop(key)
                elif key in self.frequent:
                    self.frequent.move_to_end(key)

    def mark_evictable(self, key: OffloadKey) -> None:
        return

    def mark_non_evictable(self, key: OffloadKey) -> None:
        return

    def evict(self, count: int,
              protected: set[OffloadKey]) -> list[tuple[OffloadKey, Chunk]] | None:
        if count == 0:
            return []
        recent_scan = iter(list(self.recent.items()))
        frequent_scan = iter(list(self.frequent.items()))
        recent_left = len(self.recent)
        chosen: list[tuple[OffloadKey, Chunk, bool]] = []
        for _ in range(count):
            picked: tuple[OffloadKey, Chunk] | None = None
            from_recent = False
            if recent_left >= int(self.target_recent):
                picked = next_idle(recent_scan, protected)
                from_recent = picked is not None
            if picked is None:
                picked = next_idle(frequent_scan, protected)
            if picked is None:
                picked = next_idle(recent_scan, protected)
                if picked is None:
                    return None
                from_recent = True
            if from_recent:
                recent_left -= 1
            chosen.append((*picked, from_recent))
        for key, _, from_recent in chosen:
            if from_recent:
                del self.recent[key]
                self.recent_ghosts[key] = None
            else:
                del self.frequent[key]
                self.frequent_ghosts[key] = None
        for ghosts in (self.recent_ghosts, self.frequent_ghosts):
            while len(ghosts) > self.capacity:
                ghosts.popitem(last=False)
        return [(key, chunk) for key, chunk, _ in chosen]

    def clear(self) -> None:
        for entries in (self.recent, self.frequent, self.recent_ghosts, self.frequent_ghosts):
            entries.clear()
        self.target_recent = 0.0

    def check_integrity(self) -> None:
        require(not self.recent.keys() & self.frequent.keys(), "arc: a chunk is in T1 and T2")
        cached = self.recent.keys() | self.frequent.keys()
        require(not cached & (self.recent_ghosts.keys() | self.frequent_ghosts.keys()),
                "arc: a cached chunk is also a ghost")
        require(len(self.recent_ghosts) <= self.capacity
                and len(self.frequent_ghosts) <= self.capacity,
                "arc: a ghost list is longer than the cache")
        require(0 <= self.target_recent <= self.capacity, "arc: target outside [0, capacity]")
