"""The `System` protocol: one scheduler + KV cache behind the operations an engine core performs.

Every scheduler under test (our twin, upstream vLLM 0.32.0, later upstream 0.19.1 or a user's
fork) is wrapped in an adapter that speaks in the plain, canonical types below. The driver and
the comparer only ever hold a `System`, so adding a version is adding an adapter and a registry
entry. Adapters must make their answers deterministic: anything the scheduler keeps in a set
(finished or preempted ids, resumed ids) comes back sorted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from conformance.systems.transfer_records import (
    BlockIds,
    ConnectorReport,
    JobTransfers,
    RemoteTransfers,
    Transfers,
)
from workloads.model import EngineConfig, RequestSpec

"""Block ids per KV-cache group, in group order."""


@dataclass(frozen=True, slots=True)
class NewRequest:
    """A request scheduled for the first time: prompt length, prefix-cache hit, first blocks."""

    req_id: str
    prompt_len: int
    num_computed_tokens: int
    block_ids: BlockIds
    replay_start: int = 0  # bounded replay: where the recomputed hit tail starts (0: none)


@dataclass(frozen=True, slots=True)
class CachedRequest:
    """A request that was scheduled before: running, or resumed after a preemption."""

    req_id: str
    resumed: bool
    num_computed_tokens: int
    num_output_tokens: int
    new_block_ids: BlockIds | None


@dataclass(frozen=True, slots=True)
class Scheduled:
    """One `schedule()` call made canonical. `native` is the adapter's own scheduler output,
    handed back unchanged to `System.update`; it takes no part in comparisons."""

    new_reqs: tuple[NewRequest, ...]
    cached_reqs: tuple[CachedRequest, ...]
    num_scheduled_tokens: tuple[tuple[str, int], ...]
    total_num_scheduled_tokens: int
    spec_tokens: tuple[tuple[str, tuple[int, ...]], ...]
    finished_req_ids: tuple[str, ...]
    preempted_req_ids: tuple[str, ...]
    num_common_prefix_blocks: tuple[int, ...]
    native: object = field(default=None, compare=False, repr=False)
    # What the connector asks the worker to move (None: no connector): SimpleCPUOffload's
    # events in `transfers`, the OffloadingConnector's jobs in `jobs` (two fields, not one
    # union: the remote protocol's msgspec decodes no union of two dataclasses).
    transfers: Transfers | None = None
    jobs: JobTransfers | None = None
    remote: RemoteTransfers | None = None  # a P/D connector's orders
    external_hits: tuple[tuple[str, int], ...] = ()  # (request, tokens) taken from a connector
    # Multimodal: (request, indices of the items it encodes this step), in scheduling order,
    # and the encoder-cache entries evicted since the last step (what the worker drops).
    encoder_inputs: tuple[tuple[str, tuple[int, ...]], ...] = ()
    freed_encoder_ids: tuple[str, ...] = ()
    # With iteration details logged: (encoder inputs, their embeddings) this step schedules.
    encoder_input_stats: tuple[int, int] | None = None
    # Structured output: the grammar bitmask's rows, (request, drafts the mask covers); under
    # async scheduling a step whose grammar requests have a step in flight waits for that
    # step's output (`pending_grammar`; `System.resolve_deferred` then fills both in).
    grammar_rows: tuple[tuple[str, int], ...] = ()
    pending_grammar: bool = False
    # Sub-block hits: (source, copy) block ids the worker copies before the step's forward.
    block_copies: tuple[tuple[int, int], ...] = ()
    # A connector loads KV within the step: the worker waits for it before the forward.
    has_sync_kv_loads: bool = False

    def scheduled_tokens(self) -> dict[str, int]:
        return dict(self.num_scheduled_tokens)


@dataclass(frozen=True, slots=True)
class RunnerOutput:
    """What the (simulated) model runner returns for one scheduled step, in batch order."""

    req_ids: tuple[str, ...]
    sampled_token_ids: tuple[tuple[int, ...], ...]
    connector: ConnectorReport | None = None  # the worker's transfer report (a connector's)
    pooled: tuple[str, ...] = ()  # a pooling model: requests whose pooled output is ready


@dataclass(frozen=True, slots=True)
class HandedOn:
    """What a finished prefill-side P/D request hands its decode peer (the scheduler-made part
    of upstream's `kv_transfer_params`; the peer's address and engine id are configuration):
    the blocks to read per group, the tokens they hold, the prompt tokens its first
    scheduling found cached (None: not reported)."""

    remote_block_ids: BlockIds
    remote_num_tokens: int
    remote_prefill_cached_tokens: int | None
    readback: bool = False  # a decode side's blocks kept for the next turn's prefill


@dataclass(frozen=True, slots=True)
class SpecMetrics:
    """A finished request's speculative-decoding metrics (upstream's
    per_request_spec_decode_metrics): verify steps by accepted drafts, drafts proposed, and
    (`detailed`) each step's accepted and proposed counts in order."""

    histogram: tuple[int, ...]
    num_draft_tokens: int
    per_step_accepted: tuple[int, ...] = ()
    per_step_drafted: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TokenOutput:
    """One request's share of `update_from_output`: tokens kept, and why it finished if it did.

    `finish_reason` is one of "stop", "length", "abort", "error" or None.
    """

    req_id: str
    new_token_ids: tuple[int, ...]
    finish_reason: str | None
    stop_reason: int | str | None
    handed_on: HandedOn | None = None  # a finished P/D prefill's transfer parameters
    spec_metrics: SpecMetrics | None = None  # a finished request's, when they are kept


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Prefix-cache statistics accumulated since the previous `update` (upstream resets them)."""

    requests: int
    queries: int
    hits: int
    preempted_requests: int
    preempted_queries: int
    preempted_hits: int
    reset: bool = False  # the prefix cache was reset since the previous stats
    # A connector's: its hits split by the tier that supplied them (source name, tokens),
    # sorted by name; empty for the local prefix cache.
    hits_by_source: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SpecDecodingCounts:
    """Speculative decoding in one applied step (upstream's `SpecDecodingStats`): requests
    whose drafts were verified, drafts and accepted tokens, and per draft position how many
    were proposed and accepted."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    drafts_per_pos: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """What the scheduler reports to the engine's metrics after an update (the counts a
    dashboard shows): requests running and waiting, and the share of usable blocks in use."""

    num_running_reqs: int
    num_waiting_reqs: int
    kv_cache_usage: float
    num_skipped_waiting_reqs: int = 0  # waiting requests admission skipped (max_loras, ...)
    spec_decoding: SpecDecodingCounts | None = None  # None: no draft verified in the step


@dataclass(frozen=True, slots=True)
class Update:
    outputs: tuple[TokenOutput, ...]
    prefix_cache: CacheStats | None
    scheduler_stats: SchedulerStats | None = None
    # Beside a KV connector, its lookups (the external prefix cache's; None without one).
    connector_prefix_cache: CacheStats | None = None


@dataclass(frozen=True, slots=True)
class BlockCounts:
    """Usable blocks split three ways (seed 003, section 8): `active` have ref_cnt > 0,
    `cached` are free but still hold a prefix-cache hash, `empty` are free and hold nothing.
    The null block is in none of them, so the three add up to num_blocks - 1."""

    active: int
    cached: int
    empty: int


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """A prefix-cache event, canonical: kind is stored | removed | cleared; hashes in hex.

    A stored event carries what a KV-event consumer (a router, an external index) keys on: the
    tokens of the stored blocks, the block size and the LoRA adapter name, not only hashes.
    `medium`: the tier the blocks are in (the GPU prefix cache's, or "CPU" for a connector's
    own tier)."""

    kind: str
    group: int | None = None
    block_hashes: tuple[str, ...] = ()
    parent_hash: str | None = None
    num_tokens: int = 0
    token_ids: tuple[int, ...] = ()
    block_size: int = 0
    lora_name: str | None = None
    medium: str = "GPU"


FREE_HEAD = 8
"""Free-queue entries a snapshot keeps: the next blocks an allocation would take."""


@dataclass(frozen=True, slots=True)
class EncoderCacheCounts:
    """The encoder cache of a multimodal model, in embeddings: room never handed out
    (`free`), that plus the room of unreferenced entries (`freeable`), and the identifiers
    of the entries it holds, sorted (referenced or not: which survived eviction)."""

    free: int
    freeable: int
    entries: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SystemState:
    """Queues (in the order the scheduler would visit them) and block counts.

    `free_head` (the first `FREE_HEAD` free block ids, in eviction order) and `cached_ids`
    (sorted ids of the free blocks that still hold a prefix-cache hash: the `cached` count's
    blocks) are for the divergence view's block timeline only, and optional: a system that
    cannot see them leaves them None. They are never compared, so they add no observable the
    lockstep levels would have to agree on."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    blocks: BlockCounts
    free_head: tuple[int, ...] | None = None
    cached_ids: tuple[int, ...] | None = None
    cpu_blocks: BlockCounts | None = None
    """The CPU offload tier's pool split the same three ways (None: no CPU tier)."""
    pinned: tuple[str, ...] = ()
    """Finished requests whose KV blocks a policy keeps (continuum pins), for liveness: a
    run that only waits for pins to expire is waiting on a timer, not stalled."""
    encoder_cache: EncoderCacheCounts | None = None
    """The encoder cache after the step (None: a text-only model)."""


@runtime_checkable
class System(Protocol):
    """A scheduler under test. One instance runs one workload, then is dropped.

    `none_hash` is the parent hash of every first block (hex), derived the way the system
    itself derives it (from PYTHONHASHSEED; unset: a fixed seed for the cryptographic hashes,
    a random one per process for xxhash), so the harness compares the derivation too."""

    name: str
    none_hash: str

    def add_request(self, request: RequestSpec, arrival_time: float) -> None: ...

    def abort(self, request_id: str) -> bool:
        """Abort one request (FINISHED_ABORTED); False if it was unknown or already finished."""
        ...

    def has_requests(self) -> bool: ...

    def schedule(self) -> Scheduled: ...

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update: ...

    def update_draft_token_ids(self, drafts: Sequence[tuple[str, Sequence[int]]]) -> None: ...

    def block_tables(self, request_ids: Sequence[str]) -> dict[str, BlockIds]:
        """Whole block tables of the given requests (those holding no blocks are left out)."""
        ...

    def block_hashes(self, since: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
        """Each request's block hashes (hex) from index `since[request_id]` on; requests
        unknown or with no new hash are left out."""
        ...

    def state(self) -> SystemState: ...

    def take_events(self) -> tuple[CacheEvent, ...]: ...

    def check_integrity(self) -> None: ...


SystemFactory = Callable[[EngineConfig], System]


NEEDS_VLLM: frozenset[str] = frozenset({"upstream", "upstream-0.32.0"})
"""Specs that import the vLLM installed in this process."""


def close_system(system: object) -> None:
    """Release a system. `close()` is optional: the protocol does not list it (a Protocol
    member cannot have a default for classes that do not inherit from it), so in-process
    systems without one keep working; worker proxies free their remote system with it."""
    close = getattr(system, "close", None)
    if callable(close):
        close()


