"""What the offloading manager's callers exchange with it: chunk keys, lookup answers, store
plans, events, stats, and the per-request context the scheduler keeps.

A chunk is named by an `OffloadKey`: a GPU block hash with its KV-cache group appended as four
big-endian bytes, so one hash cached by two groups is two chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NewType

OffloadKey = NewType("OffloadKey", bytes)
GROUP_SUFFIX_BYTES = 4


def offload_key(block_hash: bytes, group: int) -> OffloadKey:
    """The key of `block_hash`'s chunk in KV-cache group `group`."""
    return OffloadKey(block_hash + group.to_bytes(GROUP_SUFFIX_BYTES, "big", signed=False))


def key_block_hash(key: OffloadKey) -> bytes:
    """The block hash a key was made from (its group suffix dropped)."""
    return key[:-GROUP_SUFFIX_BYTES]


def key_group(key: OffloadKey) -> int:
    """The KV-cache group a key belongs to."""
    return int.from_bytes(key[-GROUP_SUFFIX_BYTES:], "big", signed=False)


class LookupResult(Enum):
    """A lookup's answer: absent, stored and readable, or still being written."""

    MISS = "miss"
    HIT = "hit"
    HIT_PENDING = "hit_pending"


@dataclass(frozen=True, slots=True)
class StorePlan:
    """What `prepare_store` decided: the keys to write (in the offered order), the CPU slot each
    is written to, and the keys evicted to make room (in eviction order)."""

    keys: tuple[OffloadKey, ...]
    chunk_ids: tuple[int, ...]
    evicted: tuple[OffloadKey, ...]


@dataclass(frozen=True, slots=True)
class OffloadEvent:
    """Chunks that became readable (`removed` False) or left the tier (`removed` True).
    `metadata_only`: a removal that frees only bookkeeping (a store that failed), which the
    releases that announce it mark so that subscribers do not count it as an eviction."""

    keys: tuple[OffloadKey, ...]
    removed: bool
    metadata_only: bool = False


@dataclass(frozen=True, slots=True)
class OffloadStats:
    """One stats read: the share of slots in use (held by a load or a write, or unevictable),
    the share being written, the share held for reads, the sizes of the stores allocated since
    the last read, and the stores the admission threshold turned away (None without one)."""

    usage: float
    write_usage: float
    read_usage: float
    allocation_sizes: tuple[int, ...]
    stores_skipped: int | None


@dataclass(slots=True)
class RequestAccess:
    """The chunks one request has seen, per group in first-seen order, and how: inserted by it,
    reused by it (read while ready, and not inserted by it), or offered as a store miss.
    `generation` ties it to one life of the cache: a reset starts a fresh record."""

    owner: object
    generation: int
    groups: dict[int, list[OffloadKey]] = field(default_factory=dict)
    seen: set[OffloadKey] = field(default_factory=set)
    inserted: set[OffloadKey] = field(default_factory=set)
    reused: set[OffloadKey] = field(default_factory=set)
    store_misses: set[OffloadKey] = field(default_factory=set)
    finished: bool = False


@dataclass(slots=True)
class RequestRank:
    """0.33's LRU: the one recency rank a request's chunks share while it runs (its chunks are
    then ordered by token position, tails first)."""

    owner: object
    generation: int
    rank: int


@dataclass(slots=True)
class RequestContext:
    """What the scheduler keeps per request for the manager: the token position where each
    key's chunk ends (so the manager recovers prefix order when stores arrive out of order)
    and the manager's own per-request records."""

    request_id: str
    positions: dict[OffloadKey, int] = field(default_factory=dict)
    access: RequestAccess | None = None
    lru_rank: RequestRank | None = None

    def set_position(self, key: OffloadKey, end_token: int) -> None:
        self.positions[key] = end_token
