"""Least-recently-used replacement, with recency kept apart from pinning.

Every chunk has a rank; a higher rank is more recent. A use gives the chunk a new rank: its
insertion, a touch, and (at the end of a request) every chunk the request saw, tail first so
the prefix's head ends most recent. A chunk pinned by a load keeps its rank, so when the load
completes it stands where its last use put it, not at the front. Eviction takes the evictable
chunks of lowest rank (ties by key).

0.33 (`Behaviour.offload_lru_request_ranks`) ranks by (request rank, -token position): while
a request runs, every chunk it inserts or first sees shares one rank drawn when the request
first needs it, ordered within it tails first, so a long prompt's head is evicted last even
before the request ends. A use outside a request (a touch, the end-of-request pass) ranks as
(next rank, 0).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from impl.connector.offloading.chunks import Chunk
from impl.connector.offloading.keys import OffloadKey, RequestContext, RequestRank
from impl.connector.offloading.policy import request_prefix_order
from vtwin.errors import require

Rank = tuple[int, int]


class LRUPolicy:
    """LRU over the chunks; a lazy heap of (rank, key) finds the oldest evictable ones."""

    def __init__(self, request_ranks: bool) -> None:
        self.request_ranks = request_ranks
        self.chunks: dict[OffloadKey, Chunk] = {}
        self.ranks: dict[OffloadKey, Rank] = {}
        self.evictable: set[OffloadKey] = set()
        self.generation = 0
        self._last_rank = 0
        self._heap: list[tuple[Rank, OffloadKey]] = []

    # -- ranks ---------------------------------------------------------------------------
    def _fresh_rank(self) -> Rank:
        self._last_rank += 1
        return (self._last_rank, 0)

    def _request_rank(self, context: RequestContext) -> int:
        held = context.lru_rank
        if held is None or held.owner is not self or held.generation != self.generation:
            self._last_rank += 1
            held = RequestRank(self, self.generation, self._last_rank)
            context.lru_rank = held
        return held.rank

    def _rerank(self, changed: list[OffloadKey]) -> None:
        """Put the evictable ones among `changed` (already re-ranked) back in the heap."""
        moved = [key for key in changed if key in self.evictable]
        if len(moved) >= max(64, len(self.evictable) // 4):
            self._rebuild_heap()
            return
        for key in moved:
            heapq.heappush(self._heap, (self.ranks[key], key))
        self._shrink_heap()

    def _rebuild_heap(self) -> None:
        self._heap = [(self.ranks[key], key) for key in self.evictable]
        heapq.heapify(self._heap)

    def _shrink_heap(self) -> None:
        if len(self._heap) >= max(64, 2 * len(self.evictable)):
            self._rebuild_heap()

    def _use(self, keys: Iterable[OffloadKey]) -> None:
        changed: list[OffloadKey] = []
        for key in keys:
            if key in self.chunks:
                self.ranks[key] = self._fresh_rank()
                changed.append(key)
        if changed:
            self._rerank(changed)

    # -- the policy ----------------------------------------------------------------------
    def get(self, key: OffloadKey) -> Chunk | None:
        return self.chunks.get(key)

    def cached_keys(self) -> Iterable[OffloadKey]:
        return self.chunks.keys()

    def insert(self, key: OffloadKey, chunk: Chunk, context: RequestContext) -> None:
        self.chunks[key] = chunk
        position = context.positions.get(key) if self.request_ranks else None
        if position is None:
            self.ranks[key] = self._fresh_rank()
        else:
            self.ranks[key] = (self._request_rank(context), -position)
        # A new chunk is being written (ref_cnt -1): it becomes evictable when its store
        # completes (`mark_evictable`).

    def remove(self, key: OffloadKey) -> None:
        del self.chunks[key]
        del self.ranks[key]
        self.evictable.discard(key)

    def touch(self, keys: Sequence[OffloadKey]) -> None:
        self._use(reversed(keys))

    def on_store_miss(self, keys: Sequence[OffloadKey]) -> None:
        self.touch(keys)  # a miss is not in the cache: nothing to re-rank

    def on_request_access(self, keys: Sequence[OffloadKey], context: RequestContext) -> None:
        if not self.request_ranks:
            return
        rank = self._request_rank(context)
        changed: list[OffloadKey] = []
        for key in keys:
            position = context.positions.get(key)
            if position is None or key not in self.chunks:
                continue
            if self.ranks[key] < (rank, -position):
                self.ranks[key] = (rank, -position)
                changed.append(key)
        if changed:
            self._rerank(changed)

    def on_request_finished(self, groups: Sequence[Sequence[OffloadKey]],
                            inserted_only: set[OffloadKey], reused: set[OffloadKey],
                            context: RequestContext) -> None:
        self._use(reversed(request_prefix_order(groups, context)))

    def mark_evictable(self, key: OffloadKey) -> None:
        self.evictable.add(key)
        heapq.heappush(self._heap, (self.ranks[key], key))
        self._shrink_heap()

    def mark_non_evictable(self, key: OffloadKey) -> None:
        self.evictable.remove(key)

    def evict(self, count: int,
              protected: set[OffloadKey]) -> list[tuple[OffloadKey, Chunk]] | None:
        if count == 0:
            return []
        chosen: list[tuple[Rank, OffloadKey]] = []
        chosen_keys: set[OffloadKey] = set()
        skipped: list[tuple[Rank, OffloadKey]] = []
        while self._heap and len(chosen) < count:
            entry = heapq.heappop(self._heap)
            rank, key = entry
            if key not in self.evictable or self.ranks[key] != rank or key in chosen_keys:
                continue  # stale (re-ranked, pinned, gone) or a duplicate of a live entry
            if key in protected:
                skipped.append(entry)
            else:
                chosen.append(entry)
                chosen_keys.add(key)
        restore = skipped if len(chosen) == count else skipped + chosen
        for entry in restore:
            heapq.heappush(self._heap, entry)
        if len(chosen) < count:
            return None
        victims = [(key, self.chunks[key]) for _, key in chosen]
        for key, _ in victims:
            self.remove(key)
        self._shrink_heap()
        return victims

    def clear(self) -> None:
        self.chunks.clear()
        self.ranks.clear()
        self.evictable.clear()
        self._heap.clear()
        self._last_rank = 0
        self.generation += 1

    def check_integrity(self) -> None:
        require(self.ranks.keys() == self.chunks.keys(),
                "lru: ranked keys differ from the cached ones")
        ready = {key for key, chunk in self.chunks.items() if chunk.ref_cnt == 0}
        require(self.evictable == ready, "lru: the evictable set is not the idle chunks")
        live = {(rank, key) for rank, key in self._heap}
        require(all((self.ranks[key], key) in live for key in self.evictable),
                "lru: an evictable chunk is missing from the heap")
