"""`OffloadManagerSystem`: one offloading manager behind plain values, so the twin's and
upstream's can be driven by the same calls and their answers compared with `==`.

Keys are bytes (a block hash with its group appended), requests are named by id; each system
keeps its own per-request context objects. Answers: lookups as "miss" | "hit" | "hit_pending",
store plans as (keys, slots, evicted) or None, loads as slot lists, events as
(keys, removed, metadata_only) tuples, stats as an `OffloadStats`, and `catalogue()`: every
stored key with its slot, readers and readiness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from impl.behaviour import Behaviour, behaviour_for
from impl.connector.offloading.arc import ARCPolicy
from impl.connector.offloading.keys import OffloadKey, OffloadStats, RequestContext
from impl.connector.offloading.lru import LRUPolicy
from impl.connector.offloading.manager import CPUOffloadingManager

StoreAnswer = tuple[tuple[bytes, ...], tuple[int, ...], tuple[bytes, ...]] | None
EventRecord = tuple[tuple[bytes, ...], bool, bool]
CatalogueEntry = tuple[int, int]  # (slot, ref_cnt; -1 while written)
PolicyOrder = tuple[tuple[tuple[bytes, ...], ...], float]
"""Where every chunk stands in the policy, least recent first: LRU ((keys by rank,), 0.0);
ARC ((T1, T2, B1, B2), the T1 target)."""


@dataclass(frozen=True, slots=True)
class ManagerShape:
    """How both managers are built: `num_chunks` CPU slots, the policy, the store threshold
    and the offer tracker's size."""

    name: str
    num_chunks: int
    policy: str
    store_threshold: int = 1
    max_tracker_size: int = 64_000
    groups: int = 1


class OffloadManagerSystem(Protocol):
    name: str

    def new_request(self, request_id: str) -> None: ...
    def set_position(self, request_id: str, key: bytes, end_token: int) -> None: ...
    def lookup(self, key: bytes) -> str: ...
    def prepare_load(self, request_id: str, keys: list[bytes]) -> list[int]: ...
    def complete_load(self, request_id: str, keys: list[bytes]) -> None: ...
    def touch(self, request_id: str, keys: list[bytes]) -> None: ...
    def prepare_store(self, request_id: str, keys: list[bytes]) -> StoreAnswer: ...
    def complete_store(self, request_id: str, keys: list[bytes], success: bool) -> None: ...
    def finish(self, request_id: str) -> None: ...
    def reset_cache(self) -> None: ...
    def take_events(self) -> list[EventRecord]: ...
    def stats(self) -> OffloadStats: ...
    def catalogue(self, keys: list[bytes]) -> dict[bytes, CatalogueEntry]: ...
    def policy_order(self) -> PolicyOrder: ...
    def check_integrity(self) -> None: ...


class ImplOffloadManager:
    """The twin's `CPUOffloadingManager`, following `release`."""

    def __init__(self, shape: ManagerShape, release: str = "0.32.0",
                 name: str = "impl") -> None:
        self.name = name
        behaviour: Behaviour = behaviour_for(release)
        self.manager = CPUOffloadingManager(
            shape.num_chunks, shape.policy, enable_events=True,
            store_threshold=shape.store_threshold, max_tracker_size=shape.max_tracker_size,
            behaviour=behaviour)
        self.contexts: dict[str, RequestContext] = {}

    def new_request(self, request_id: str) -> None:
        self.contexts[request_id] = RequestContext(request_id)
        self.manager.on_new_request(self.contexts[request_id])

    def set_position(self, request_id: str, key: bytes, end_token: int) -> None:
        self.contexts[request_id].set_position(OffloadKey(key), end_token)

    def lookup(self, key: bytes) -> str:
        return self.manager.lookup(OffloadKey(key)).value

    def prepare_load(self, request_id: str, keys: list[bytes]) -> list[int]:
        return self.manager.prepare_load([OffloadKey(k) for k in keys],
                                         self.contexts[request_id])

    def complete_load(self, request_id: str, keys: list[bytes]) -> None:
        self.manager.complete_load([OffloadKey(k) for k in keys])

    def touch(self, request_id: str, keys: list[bytes]) -> None:
        self.manager.touch([OffloadKey(k) for k in keys])

    def prepare_store(self, request_id: str, keys: list[bytes]) -> StoreAnswer:
        plan = self.manager.prepare_store([OffloadKey(k) for k in keys],
                                          self.contexts[request_id])
        if plan is None:
            return None
        return (tuple(plan.keys), plan.chunk_ids, tuple(plan.evicted))

    def complete_store(self, request_id: str, keys: list[bytes], success: bool) -> None:
        self.manager.complete_store([OffloadKey(k) for k in keys], success)

    def finish(self, request_id: str) -> None:
        self.manager.on_request_finished(self.contexts[request_id])

    def reset_cache(self) -> None:
        self.manager.reset_cache()

    def take_events(self) -> list[EventRecord]:
        return [(tuple(e.keys), e.removed, e.metadata_only) for e in self.manager.take_events()]

    def stats(self) -> OffloadStats:
        return self.manager.get_stats()

    def catalogue(self, keys: list[bytes]) -> dict[bytes, CatalogueEntry]:
        found = {}
        for key in keys:
            chunk = self.manager.policy.get(OffloadKey(key))
            if chunk is not None:
                found[key] = (chunk.chunk_id, chunk.ref_cnt)
        return found

    def policy_order(self) -> PolicyOrder:
        policy = self.manager.policy
        if isinstance(policy, LRUPolicy):
            ranks = policy.ranks
            return ((tuple(sorted(ranks, key=lambda key: (ranks[key], key))),), 0.0)
        assert isinstance(policy, ARCPolicy)
        return ((tuple(policy.recent), tuple(policy.frequent), tuple(policy.recent_ghosts),
                 tuple(policy.frequent_ghosts)), float(policy.target_recent))

    def check_integrity(self) -> None:
        self.manager.check_integrity()
