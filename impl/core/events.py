"""KV-cache events: what a block pool reports to subscribers (e.g. a KV-aware router).

`medium` says which tier the blocks are in: the GPU pool's events say "GPU"; the
OffloadingConnector's CPU tier reports its chunks as "CPU" (`impl.connector.offloading.events`).
"""

from __future__ import annotations

from dataclasses import dataclass

from impl.core.block import BlockHash


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered the prefix cache, in order; `parent_block_hash` precedes the first."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_name: str | None
    group_id: int
    medium: str = "GPU"


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """A cached block was evicted (its hash dropped) to be reused."""

    block_hashes: tuple[BlockHash, ...]
    group_id: int
    medium: str = "GPU"


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared
