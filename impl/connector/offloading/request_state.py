"""What the OffloadingConnector's scheduler side keeps per request, per KV-cache group.

A group cuts the request's tokens into chunks of `tokens_per_chunk` (a whole number of GPU
blocks, `blocks_per_chunk`). A chunk's key is the block hash of its last hash block with the
group appended, so a chunk only has a key once the request's hashes reach its end. The group
also mirrors the request's GPU block table as the scheduler outputs it, and remembers the
first chunk not offered for storing yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from impl.connector.offloading.keys import OffloadKey, RequestContext, offload_key
from impl.core.specs import KVCacheSpec

if TYPE_CHECKING:
    from impl.sched.request import Request


@dataclass(frozen=True, slots=True)
class GroupShape:
    """One offloaded KV-cache group: its index, tokens per GPU block and per chunk, how many
    hash blocks a chunk spans, its spec, and how many chunks a hit needs in it (`window`:
    None for full attention, which needs the whole prefix; `impl.connector.offloading.windows`)."""

    group: int
    tokens_per_block: int
    tokens_per_chunk: int
    hashes_per_chunk: int
    spec: KVCacheSpec
    window: int | None = None


@dataclass(slots=True)
class GroupState:
    keys: list[OffloadKey] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    next_stored_chunk: int = 0


@dataclass(slots=True)
class RequestOffload:
    """A request as the connector sees it: its per-group state, the manager's per-request
    context, its jobs in flight (one load, or any number of stores, never both), and whether
    the manager has been told it finished."""

    request: Request
    context: RequestContext
    groups: tuple[GroupState, ...]
    num_local_tokens: int = 0
    jobs: set[int] = field(default_factory=set)
    finished_signalled: bool = False
    # A hit found past the last whole chunk, at this hash boundary inside the next block
    # (`Lookups._partial_tail`): its load reads the boundary's keys. None: no such hit.
    partial_tail_boundary: int | None = None
    # The token ranges its last load's chunks cover (`impl.connector.offloading.hit_sources`).
    load_ranges: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def new(cls, request: Request, shapes: tuple[GroupShape, ...]) -> RequestOffload:
        return cls(request, RequestContext(request.request_id),
                   tuple(GroupState() for _ in shapes))

    def extend_keys(self, shapes: tuple[GroupShape, ...]) -> None:
        """Key every chunk the request's hashes now reach, recording where each chunk ends."""
        num_hashes = len(self.request.block_hashes)
        for shape, state in zip(shapes, self.groups, strict=True):
            per_chunk = shape.tokens_per_chunk
            reached = num_hashes // shape.hashes_per_chunk
            for chunk in range(len(state.keys), reached):
                state.keys.append(self.chunk_key(shape, (chunk + 1) * per_chunk))

    def chunk_key(self, shape: GroupShape, boundary: int) -> OffloadKey:
        """The key of `shape`'s chunk ending at token `boundary` (a whole chunk, within the
        request's hashes), its position recorded in the request's context."""
        hash_block = shape.tokens_per_chunk // shape.hashes_per_chunk
        key = offload_key(self.request.block_hashes[boundary // hash_block - 1], shape.group)
        self.context.set_position(key, boundary)
        return key

    def storable_chunks(self, shape: GroupShape, state: GroupState, num_tokens: int,
                        blocks_per_chunk: int) -> int:
        """Leading chunks that are computed (within `num_tokens`), allocated and keyed."""
        return min(num_tokens // shape.tokens_per_chunk, len(state.block_ids) // blocks_per_chunk,
                   len(state.keys))

    def advance_stored(self, shapes: tuple[GroupShape, ...], num_tokens: int,
                       blocks_per_chunk: int) -> None:
        """Nothing to store up to `num_tokens`: move every group's cursor past it."""
        for shape, state in zip(shapes, self.groups, strict=True):
            state.next_stored_chunk = max(
                state.next_stored_chunk,
                self.storable_chunks(shape, state, num_tokens, blocks_per_chunk))
