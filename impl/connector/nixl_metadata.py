"""What the NIXL connector's scheduler side hands its worker each step (`impl.connector.nixl`).
Apart from the connector so the scheduler's output can name it without importing the
connector."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PullOrder:
    """A pull for the worker: the local blocks to fill (per group; the blocks of the local
    prefix hit left out), how many blocks per group the local hit covers, and whether the
    request waits for it (False: nothing to pull, only the peer's blocks to release)."""

    local_block_ids: tuple[list[int], ...]
    num_cached_blocks: tuple[int, ...]
    awaiting: bool


@dataclass(slots=True)
class NixlMetadata:
    """One step's orders for the worker. `reqs_to_send`: prefills finished since the last step
    whose blocks now wait for the peer's read. `reqs_in_batch`: prefill-side requests admitted
    this step. `reqs_not_processed`: prefill-side requests that ended without a read.

    Push mode only (`impl.connector.nixl_push`): `push_registrations`, the decode-side
    requests whose local blocks the worker announces to the prefill peer this step (the
    blocks per group); `push_finished_blocks`, the prefills finished since the last step whose
    blocks the worker writes to the decode peer once it has registered."""

    reqs_to_recv: dict[str, PullOrder] = field(default_factory=dict)
    reqs_to_send: list[str] = field(default_factory=list)
    reqs_in_batch: set[str] = field(default_factory=set)
    reqs_not_processed: set[str] = field(default_factory=set)
    push_registrations: dict[str, tuple[list[int], ...]] = field(default_factory=dict)
    push_finished_blocks: dict[str, tuple[list[int], ...]] = field(default_factory=dict)
