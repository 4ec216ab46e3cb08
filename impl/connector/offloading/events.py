"""The OffloadingConnector's KV events: its CPU tier's chunks, announced as blocks.

The manager reports chunks by key when they become readable (a store finished) and when they
leave the tier (evicted to make room). The connector hands subscribers these as KV events with
medium "CPU", in the order the manager reported them (`ConnectorEvents.kv_events`):

* **plain** (the default): a stored event per chunk carrying the chunk's key hash alone (the
  block hash of its last hash block; no tokens, no parent, block size 0: the manager keeps
  nothing else), and a removed event per group for each eviction, the keys' hashes;
* **self-describing** (opt-in, vLLM's `self_describing_kv_events`): a KV-aware router that
  indexes the CPU tier by content needs what the manager does not keep, so the connector
  snapshots each chunk's payload while the request is at hand: when it offers the chunk for
  storing, or finds it readable on the CPU (a lookup hit) with no payload yet. A stored event
  then carries the chunk's per-block hashes (the last hash block of each GPU block), its
  tokens, the hash before it as parent, the GPU block size and the LoRA name; a removal
  announces the same per-block hashes. A mamba partial tail (a state inside a block) is
  described from the block's start to its boundary, hash block by hash block. Windowed groups
  (sliding window, chunked local, mamba) keep the plain payload, as does any chunk whose
  payload was never captured. A payload lives until its chunk's removal has been announced,
  and is dropped at the end of that batch unless something in between put the chunk back.

A removal that only frees bookkeeping (0.33's failed store, `OffloadEvent.metadata_only`) is
no eviction and announces nothing; it does take the chunk's payload off the tier.

Not modelled: 0.33 also snapshots a hit still being written. No workload tells it apart: a
chunk being written had its payload snapshot when its store was offered, so the lookup finds
one already (short of a chunk evicted and offered again within one step, whose payload the
batch that announces both drops, and then only until its next readable hit).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from impl.connector.offloading.keys import (
    OffloadEvent,
    OffloadKey,
    key_block_hash,
    key_group,
)
from impl.core.block import BlockHash
from impl.core.events import BlockRemoved, BlockStored, KVCacheEvent
from impl.core.hashing import hashes_at_block_size

if TYPE_CHECKING:
    from impl.connector.offloading.request_state import GroupShape
    from impl.sched.request import Request

CPU = "CPU"


@dataclass(slots=True)
class ChunkPayload:
    """What a self-describing event says about one chunk; `resident` while its chunk is on
    the tier as far as the announced events go."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_name: str | None
    group: int
    resident: bool = True


class ConnectorEvents:
    """The connector's event translation, with the payloads captured for self-describing
    events (`payloads`, by chunk key; always empty when the option is off)."""

    def __init__(self, self_describing: bool) -> None:
        self.self_describing = self_describing
        self.payloads: dict[OffloadKey, ChunkPayload] = {}

    # -- capture ----------------------------------------------------------------------------
    def record_store(self, request: Request, shape: GroupShape, chunk: int,
                     key: OffloadKey) -> None:
        """Chunk `chunk` of `shape` is offered for storing: snapshot its payload anew."""
        if self.self_describing and shape.window is None:
            self.payloads[key] = _chunk_payload(request, shape, chunk)

    def record_lookup(self, request: Request, shape: GroupShape, chunk: int,
                      key: OffloadKey) -> None:
        """A lookup found chunk `chunk` readable on the tier: snapshot its payload unless one
        is kept already."""
        if (self.self_describing and shape.window is None
                and key not in self.payloads):
            self.payloads[key] = _chunk_payload(request, shape, chunk)

    def record_partial(self, request: Request, shape: GroupShape, boundary: int,
                       key: OffloadKey, *, lookup: bool) -> None:
        """A partial tail ending at `boundary` is stored (or, `lookup`, found with no payload
        kept): snapshot the hash blocks from its block's start to the boundary."""
        if not self.self_describing or shape.window is not None:
            return
        if lookup and key in self.payloads:
            return
        per_hash = shape.tokens_per_chunk // shape.hashes_per_chunk
        start = (boundary - 1) // shape.tokens_per_chunk * shape.tokens_per_chunk
        first = start // per_hash
        hashes = request.block_hashes
        self.payloads[key] = ChunkPayload(
            tuple(hashes[first:boundary // per_hash]), hashes[first - 1] if first else None,
            tuple(request.all_token_ids[start:boundary]), per_hash, request.lora_name,
            shape.group)

    def reset(self) -> None:
        """The tier was emptied: every payload is stale."""
        self.payloads.clear()

    # -- translation ------------------------------------------------------------------------
    def kv_events(self, events: Iterable[OffloadEvent]) -> list[KVCacheEvent]:
        """The manager's events, in order, as KV events."""
        out: list[KVCacheEvent] = []
        removed: set[OffloadKey] = set()
        for event in events:
            if not event.removed:
                out.extend(self._stored(key) for key in event.keys)
                continue
            if self.self_describing:
                removed.update(event.keys)
            by_group: dict[int, list[BlockHash]] = {}
            for key in event.keys:
                payload = self.payloads.get(key)
                if payload is not None:
                    payload.resident = False
                if event.metadata_only:
                    continue
                if payload is None:
                    by_group.setdefault(key_group(key), []).append(key_block_hash(key))
                else:
                    by_group.setdefault(payload.group, []).extend(payload.block_hashes)
            out.extend(BlockRemoved(tuple(hashes), group, medium=CPU)
                       for group, hashes in by_group.items())
        for key in removed:  # a store later in the batch may have put it back
            payload = self.payloads.get(key)
            if payload is not None and not payload.resident:
                del self.payloads[key]
        return out

    def _stored(self, key: OffloadKey) -> BlockStored:
        payload = self.payloads.get(key)
        if payload is None:
            return BlockStored((key_block_hash(key),), None, (), 0, None, key_group(key),
                               medium=CPU)
        return BlockStored(payload.block_hashes, payload.parent_block_hash, payload.token_ids,
                           payload.block_size, payload.lora_name, payload.group, medium=CPU)


def _chunk_payload(request: Request, shape: GroupShape, chunk: int) -> ChunkPayload:
    """Chunk `chunk`'s payload: the last hash of each of its GPU blocks, its tokens, the hash
    before its first hash block as parent."""
    per_hash = shape.tokens_per_chunk // shape.hashes_per_chunk
    first = chunk * shape.hashes_per_chunk
    hashes = request.block_hashes
    own = hashes[first:first + shape.hashes_per_chunk]
    start = chunk * shape.tokens_per_chunk
    return ChunkPayload(
        tuple(hashes_at_block_size(own, per_hash, shape.tokens_per_block)),
        hashes[first - 1] if first else None,
        tuple(request.all_token_ids[start:start + shape.tokens_per_chunk]),
        shape.tokens_per_block, request.lora_name, shape.group)
