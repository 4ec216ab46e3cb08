"""The CPU offload tier's own KV events: what a KV-aware router hears about the CPU copies.

With KV events on, the tier announces its blocks beside the GPU pool's, with its medium: "CPU"
for host memory, "STORAGE" for the disk backend (`OffloadSettings.medium`):

* **stored**, when a store event completes (the copy became findable), one event per key the
  copy takes: its GPU source's primary hash (block size: its group's) and each sub-block key
  the source carries (block size: the hash block size). The tokens, the parent hash and the
  LoRA name are captured when the store is *chosen* (eager mode reads them off the request,
  which may be gone when the worker reports the copy done); a store chosen without a request
  in hand (lazy mode's free-queue walk, a mamba state hand-off, a finishing request's prompt
  tail) announces its keys with no payload (no tokens, no parent, block size 0 for sub-block
  keys). A payload whose token count differs from the event's block size is sent empty;
* **removed**, when the CPU pool evicts a cached copy to make room, one event per key
  (the pool's own eviction events, re-labelled with the tier's medium).

Both kinds go through the CPU pool's event queue, so subscribers hear them in the order they
happened (`SimpleCPUOffloadScheduler.take_events`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.events import BlockRemoved, BlockStored, KVCacheEvent
from vtwin.errors import ReleaseCheckFailed

if TYPE_CHECKING:
    from collections.abc import Sequence

    from impl.sched.request import Request

BlockMeta = dict[BlockHash, "StoredBlockMeta"]
"""One stored block's payloads, by key (its primary hash and its sub-block keys)."""


@dataclass(frozen=True, slots=True)
class StoredBlockMeta:
    """What a stored event says about one key, captured while the request was at hand.
    `block_size` None: the key's group's block size (a primary key)."""

    token_ids: tuple[int, ...]
    parent_block_hash: BlockHash | None
    lora_name: str | None
    block_size: int | None = None


def capture_block_meta(request: Request, index: int, primary: BlockHash,
                       block_hashes: Sequence[BlockHash], block_size: int,
                       hash_block_size: int) -> BlockMeta:
    """Payloads of block `index` of one group (`block_hashes`: the request's hashes at that
    group's `block_size`): the block's own, and one per hash block inside it other than the
    primary key."""
    tokens = request.all_token_ids
    start, end = index * block_size, (index + 1) * block_size
    lora = request.lora_name
    metas: BlockMeta = {primary: StoredBlockMeta(
        tuple(tokens[start:end]), None if index == 0 else block_hashes[index - 1], lora)}
    if hash_block_size == block_size:
        return metas
    fine = request.block_hashes
    if end // hash_block_size > len(fine):
        # A request finishing on max_tokens with drafts scheduled past its last token counts
        # them as computed: its last block is confirmed, keyed at a sub-block boundary, over
        # hash blocks the request never hashed. Upstream indexes past its hashes here.
        raise ReleaseCheckFailed("cpu-event-hashes-past-request", (
            f"{request.request_id}: block {index} ends at token {end}, past its "
            f"{len(fine)} hash blocks of {hash_block_size}"))
    for sub in range(start // hash_block_size, end // hash_block_size):
        key = fine[sub]
        if key == primary:
            continue
        at = sub * hash_block_size
        metas[key] = StoredBlockMeta(tuple(tokens[at:at + hash_block_size]),
                                     None if sub == 0 else fine[sub - 1], lora,
                                     hash_block_size)
    return metas


def stored_events(source: KVCacheBlock, metas: BlockMeta, group_block_sizes: Sequence[int],
                  medium: str) -> list[KVCacheEvent]:
    """The stored events of one completed copy of GPU block `source` (hashed), from the
    payloads captured for it (none: empty payloads)."""
    assert source.block_hash is not None
    group = source.hash_group_id
    events: list[KVCacheEvent] = [
        _stored(source.block_hash, metas.get(source.block_hash), group_block_sizes[group], group,
                medium)]
    for key in source.extra_hashes or ():
        meta = metas.get(key)
        size = meta.block_size if meta is not None and meta.block_size is not None else 0
        events.append(_stored(key, meta, size, group, medium))
    return events


def _stored(key: BlockHash, meta: StoredBlockMeta | None, block_size: int,
            group: int, medium: str) -> BlockStored:
    if meta is None or len(meta.token_ids) != block_size:
        return BlockStored((key,), None, (), block_size, None if meta is None
                           else meta.lora_name, group, medium=medium)
    return BlockStored((key,), meta.parent_block_hash, meta.token_ids, block_size,
                       meta.lora_name, group, medium=medium)


def on_tier(events: Sequence[KVCacheEvent], medium: str) -> list[KVCacheEvent]:
    """The CPU pool's queue as the tier announces it: its evictions re-labelled `medium`."""
    return [BlockRemoved(e.block_hashes, e.group_id, medium=medium)
            if isinstance(e, BlockRemoved) else e for e in events]
