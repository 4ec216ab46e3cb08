"""Records of the CPU offload tier's bookkeeping: transfers, per-request load and store state,
and pinned CPU hits awaiting allocation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from impl.core.block import BlockHash, KVCacheBlock
from impl.core.block_pool import BlockPool

if TYPE_CHECKING:
    from impl.connector.offload_events import BlockMeta
    from impl.sched.request import Request

PerGroupBlocks = tuple[list[KVCacheBlock], ...]


@dataclass(slots=True)
class Transfer:
    """Index-parallel GPU and CPU block ids of one load or store; a store with KV events on
    also carries each block's event payloads (`offload_events`), index-parallel too."""

    gpu_block_ids: list[int]
    cpu_block_ids: list[int]
    block_meta: list[BlockMeta] | None = None


@dataclass(slots=True)
class LoadState:
    """A request's load: sent to the worker once `load_event` is set; `finished` when the
    request ended while the load was in flight (cleanup waits for the worker)."""

    request: Request
    transfer: Transfer
    load_event: int | None = None
    finished: bool = False


@dataclass(slots=True)
class StoreState:
    """Eager mode: the request's block table as the worker knows it (grown from each step's
    output), how far each group has been scanned for stores, and its store events in flight."""

    request: Request
    block_ids: tuple[list[int], ...]
    num_stored_blocks: list[int]
    store_events: set[int] = field(default_factory=set)
    finished: bool = False


@dataclass(frozen=True, slots=True)
class CPUHit:
    """CPU blocks found for a request (per group, pinned) and the local prefix they follow."""

    blocks: PerGroupBlocks
    num_computed_tokens: int


@dataclass(slots=True)
class StoreBatch:
    """Stores chosen for one step: block pairs and the requests they came from (eager), and
    with KV events on, each block's event payloads."""

    gpu_block_ids: list[int] = field(default_factory=list)
    cpu_block_ids: list[int] = field(default_factory=list)
    req_ids: list[str] = field(default_factory=list)
    block_meta: list[BlockMeta] | None = None


def hit_view(block_hashes: Sequence[BlockHash]) -> Request:
    """A stand-in request for a cache-hit search over `block_hashes` (the coordinators read
    nothing else of the request they search for). A real `Request`, as the compiled twin's
    coordinator checks the type."""
    from impl.sched.request import Request

    view = Request("cpu-lookup", ())
    view.block_hashes = list(block_hashes)
    return view


def free_hit(pool: BlockPool, hit: CPUHit) -> None:
    """Drop the pin a pending hit holds on its CPU blocks."""
    blocks = [b for group in hit.blocks for b in group if not b.is_null]
    if blocks:
        pool.free_blocks(blocks)
