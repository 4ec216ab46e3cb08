"""The OffloadingConnector's KV events: its CPU tier's chunks, announced as blocks.

The manager reports chunks by key when they become readable (a store finished) and when they
leave the tier (evicted to make room). The connector hands subscribers these as KV events with
medium "CPU": a stored event per chunk, carrying the chunk's key hash alone (the block hash of
its last hash block; no tokens, no parent, block size 0: the manager keeps nothing else), and
a removed event per group for each eviction. A removal that only frees bookkeeping (0.33's
failed store, `OffloadEvent.metadata_only`) is no eviction and announces nothing. Upstream can
announce richer stored events (tokens, parents) when asked to (`self_describing_kv_events`);
that option is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable

from impl.connector.offloading.keys import OffloadEvent, key_block_hash, key_group
from impl.core.block import BlockHash
from impl.core.events import BlockRemoved, BlockStored, KVCacheEvent

CPU = "CPU"


def kv_events(events: Iterable[OffloadEvent]) -> list[KVCacheEvent]:
    """The manager's events, in order, as KV events."""
    out: list[KVCacheEvent] = []
    for event in events:
        if not event.removed:
            out.extend(BlockStored((key_block_hash(key),), None, (), 0, None, key_group(key),
                                   medium=CPU) for key in event.keys)
        elif not event.metadata_only:
            by_group: dict[int, list[BlockHash]] = {}
            for key in event.keys:
                by_group.setdefault(key_group(key), []).append(key_block_hash(key))
            out.extend(BlockRemoved(tuple(hashes), group, medium=CPU)
                       for group, hashes in by_group.items())
    return out

