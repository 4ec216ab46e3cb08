"""`CPUOffloadingManager`: the OffloadingConnector's catalogue of chunks in the CPU tier.

The connector asks it, per block hash, whether a chunk is stored (`lookup`), pins chunks it
reads (`prepare_load` ... `complete_load`), marks prefix-cache hits as used (`touch`), and
offers newly computed blocks for storing (`prepare_store` ... `complete_store`). A store gets
slots, evicting idle chunks by the policy when the tier is full, but never one of the keys in
the same offer: an offer is refused whole (None) when that leaves too few. With a store
threshold of 2 or more, a key is stored only once it has been offered that many times (a
bounded tracker of offer counts, oldest forgotten first).

Each request's accesses are gathered (`RequestAccess`) and handed to the policy once, in
prefix order, when the request finishes: that is when ARC learns which chunks were reused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from impl.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from impl.connector.offloading.arc import ARCPolicy
from impl.connector.offloading.chunks import Chunk, SlotPool
from impl.connector.offloading.keys import (
    LookupResult,
    OffloadEvent,
    OffloadKey,
    OffloadStats,
    RequestAccess,
    RequestContext,
    StorePlan,
    key_group,
)
from impl.connector.offloading.lru import LRUPolicy
from impl.connector.offloading.policy import CachePolicy, in_prefix_order
from impl.connector.offloading.tracker import OfferTracker
from vtwin.errors import require

POLICIES = ("lru", "arc")


def make_policy(name: str, capacity: int, behaviour: Behaviour) -> CachePolicy:
    if name == "lru":
        return LRUPolicy(request_ranks=behaviour.offload_lru_request_ranks)
    if name == "arc":
        return ARCPolicy(capacity)
    raise ValueError(f"cache_policy: must be one of {', '.join(POLICIES)} (got {name!r})")


class CPUOffloadingManager:
    def __init__(self, num_chunks: int, cache_policy: str = "lru", enable_events: bool = False,
                 store_threshold: int = 1, max_tracker_size: int = 64_000,
                 behaviour: Behaviour = DEFAULT_BEHAVIOUR) -> None:
        self.behaviour = behaviour
        self.slots = SlotPool(num_chunks)
        self.policy: CachePolicy = make_policy(cache_policy, num_chunks, behaviour)
        self.events: list[OffloadEvent] | None = [] if enable_events else None
        self.num_idle = 0  # readable chunks no load holds: what eviction may take
        self.num_writing = 0
        self.generation = 0
        self.tracker = OfferTracker(store_threshold, max_tracker_size) \
            if store_threshold >= 2 else None
        self.allocation_sizes: list[int] = []

    # -- per-request accounting -----------------------------------------------------------
    def _access(self, context: RequestContext) -> RequestAccess:
        access = context.access
        if access is None or access.owner is not self or access.generation != self.generation:
            access = RequestAccess(self, self.generation)
            context.access = access
        return access

    def _record(self, keys: Iterable[OffloadKey], context: RequestContext,
                reused: Iterable[OffloadKey] = ()) -> None:
        access = self._access(context)
        first_seen: list[OffloadKey] = []
        for key in keys:
            if key in access.seen:
                continue
            require(not access.finished,
                    f"offloading: request {context.request_id} saw a chunk after it finished")
            access.groups.setdefault(key_group(key), []).append(key)
            access.seen.add(key)
            first_seen.append(key)
        if first_seen:
            self.policy.on_request_access(first_seen, context)
        access.reused.update(key for key in reused if key not in access.inserted)

    def on_new_request(self, context: RequestContext) -> None:
        self._access(context)

    def on_request_finished(self, context: RequestContext) -> None:
        access = context.access
        if (access is None or access.owner is not self or access.generation != self.generation
                or access.finished):
            return
        access.finished = True
        groups = [in_prefix_order(access.groups[group], context)
                  for group in sorted(access.groups)]
        self.policy.on_request_finished(groups, access.inserted - access.reused,
                                        access.reused, context)

    # -- lookups and loads ----------------------------------------------------------------
    def lookup(self, key: OffloadKey) -> LookupResult:
        chunk = self.policy.get(key)
        if chunk is None:
            return LookupResult.MISS
        return LookupResult.HIT if chunk.is_ready else LookupResult.HIT_PENDING

    def prepare_load(self, keys: Sequence[OffloadKey], context: RequestContext) -> list[int]:
        """Pin readable chunks for a load; their CPU slots, in order."""
        slots: list[int] = []
        for key in keys:
            chunk = self.policy.get(key)
            require(chunk is not None and chunk.is_ready,
                    f"offloading: load of a chunk that is not readable ({key.hex()})")
            assert chunk is not None
            if chunk.ref_cnt == 0:
                self.policy.mark_non_evictable(key)
                self.num_idle -= 1
            chunk.ref_cnt += 1
            slots.append(chunk.chunk_id)
        self._record(keys, context, reused=keys)
        return slots

    def touch(self, keys: Sequence[OffloadKey]) -> None:
        self.policy.touch(keys)

    def complete_load(self, keys: Sequence[OffloadKey]) -> None:
        for key in keys:
            chunk = self.policy.get(key)
            require(chunk is not None and chunk.ref_cnt > 0,
                    f"offloading: completed load of a chunk no load holds ({key.hex()})")
            assert chunk is not None
            chunk.ref_cnt -= 1
            if chunk.ref_cnt == 0:
                self.num_idle += 1
                self.policy.mark_evictable(key)

    # -- stores ---------------------------------------------------------------------------
    def prepare_store(self, keys: Sequence[OffloadKey],
                      context: RequestContext) -> StorePlan | None:
        """Slots for the offered keys not yet stored; None when eviction cannot make room."""
        offered = list(keys)
        if self.tracker is not None:
            self.tracker.record(offered)
        missing: list[OffloadKey] = []
        ready: list[OffloadKey] = []  # stored and readable: a reuse (one being written is neither)
        for key in offered:
            chunk = self.policy.get(key)
            if chunk is None:
                missing.append(key)
            elif chunk.is_ready:
                ready.append(key)
        if self.tracker is not None:
            missing = self.tracker.admitted(missing)
        access = self._access(context)
        unseen_misses = [key for key in missing if key not in access.store_misses]
        if unseen_misses:
            self.policy.on_store_miss(unseen_misses)
            access.store_misses.update(unseen_misses)
        recorded = set(missing).union(ready)
        self._record([key for key in offered if key in recorded], context, reused=ready)
        if not missing:
            return StorePlan((), (), ())
        self.allocation_sizes.append(len(missing))
        shortfall = len(missing) - self.slots.num_free()
        evicted: list[OffloadKey] = []
        if shortfall > 0:
            if shortfall > self.num_idle:
                return None
            victims = self.policy.evict(shortfall, protected=set(offered))
            if victims is None:
                return None
            self.num_idle -= len(victims)
            for key, chunk in victims:
                self.slots.give_back(chunk.chunk_id)
                evicted.append(key)
            if self.events is not None:
                self.events.append(OffloadEvent(tuple(evicted), removed=True))
        slots = self.slots.take(len(missing))
        for key, slot in zip(missing, slots, strict=True):
            self.policy.insert(key, Chunk(slot), context)
        self.num_writing += len(missing)
        access.inserted.update(missing)
        return StorePlan(tuple(missing), tuple(slots), tuple(evicted))

    def complete_store(self, keys: Sequence[OffloadKey], success: bool = True) -> None:
        """A store finished: its chunks become readable (and idle), or, when it failed, leave
        the tier with their slots given back."""
        done: list[OffloadKey] = []
        for key in keys:
            chunk = self.policy.get(key)
            if chunk is None or chunk.is_ready:
                continue
            self.num_writing -= 1
            if success:
                chunk.ref_cnt = 0
                self.num_idle += 1
                self.policy.mark_evictable(key)
            else:
                self.policy.remove(key)
                self.slots.give_back(chunk.chunk_id)
            done.append(key)
        if not done or self.events is None:
            return
        if success:
            self.events.append(OffloadEvent(tuple(done), removed=False))
        elif self.behaviour.offload_failed_store_event:
            self.events.append(OffloadEvent(tuple(done), removed=True, metadata_only=True))

    # -- whole-cache operations -----------------------------------------------------------
    def reset_cache(self) -> None:
        """Forget every chunk, pinned or not (the connector no longer completes old jobs)."""
        self.policy.clear()
        self.generation += 1
        self.num_idle = 0
        self.num_writing = 0
        self.slots.clear()

    def take_events(self) -> list[OffloadEvent]:
        if self.events is None:
            return []
        taken, self.events = self.events, []
        return taken

    def get_stats(self) -> OffloadStats:
        capacity = self.slots.capacity
        in_use = self.slots.handed_out - len(self.slots.given_back) - self.num_idle
        usage = in_use / capacity if capacity > 0 else 0.0
        writing = self.num_writing / capacity if capacity > 0 else 0.0
        sizes, self.allocation_sizes = tuple(self.allocation_sizes), []
        skipped = self.tracker.take_skipped() if self.tracker is not None else None
        return OffloadStats(usage, writing, max(usage - writing, 0.0), sizes, skipped)

    def check_counts(self) -> None:
        """The counters alone, O(1): idle and written chunks are held ones."""
        held = self.slots.handed_out - len(self.slots.given_back)
        require(self.num_idle >= 0 and self.num_writing >= 0
                and self.num_idle + self.num_writing <= held,
                f"offloading: {self.num_idle} idle and {self.num_writing} written chunks "
                f"counted, {held} held")

    def check_integrity(self) -> None:
        self.policy.check_integrity()
        chunks = [chunk for key in self.policy.cached_keys()
                  if (chunk := self.policy.get(key)) is not None]
        held = [chunk.chunk_id for chunk in chunks]
        free = self.slots.given_back
        require(len(set(held)) == len(held), "offloading: two chunks share a CPU slot")
        require(not set(held) & set(free), "offloading: a free slot holds a chunk")
        require(len(held) + len(free) == self.slots.handed_out,
                "offloading: handed-out slots are neither held nor free")
        require(self.num_idle == sum(chunk.ref_cnt == 0 for chunk in chunks),
                f"offloading: {self.num_idle} idle counted, the chunks say otherwise")
        require(self.num_writing == sum(not chunk.is_ready for chunk in chunks),
                f"offloading: {self.num_writing} writes counted, the chunks say otherwise")
