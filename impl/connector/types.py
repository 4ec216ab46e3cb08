"""The records a KV connector exchanges with the scheduler and the worker.

The scheduler asks the connector, per admitted request, how many tokens past the local prefix
hit it can supply (`get_num_new_matched_tokens`), tells it which blocks were allocated for them
(`update_state_after_alloc`) and hands the worker, every step, what the connector wants moved
(`OffloadMetadata`). The worker answers in `KVConnectorOutput`: loads finished (by request),
stores finished (by event), and what failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from impl.core.prefix_stats import CacheHitSource

NO_EVENT = -1
"""An event index meaning "nothing of this kind this step"."""

LOAD_FAILURE_POLICIES = ("fail", "recompute")
OFFLOAD_BACKENDS = ("cpu", "disk")


@dataclass(frozen=True, slots=True)
class OffloadSettings:
    """The CPU offload tier's knobs. `num_cpu_blocks`: the CPU pool's size (upstream derives it
    from a byte budget; the twin takes the count). `lazy_offload`: store GPU blocks only when
    they near eviction (a cursor over the GPU free queue) instead of as soon as they are
    computed. `load_failure_policy`: what a failed load does to its request: `fail` (upstream's
    default) finishes it with an error, `recompute` recomputes from the last good block."""

    num_cpu_blocks: int
    lazy_offload: bool = False
    load_failure_policy: str = "fail"
    backend: str = "cpu"
    """Where the copies live: `cpu` (pinned host memory) or `disk` (upstream's
    `kv_offload_backend="disk"`: the worker writes them to files; the pool, then sized by the
    disk's byte budget, works alike). The scheduler side differs in what it tells the metrics:
    its events' medium and its hits' source."""

    def __post_init__(self) -> None:
        if self.num_cpu_blocks < 1:
            raise ValueError(f"kv_connector.num_cpu_blocks: must be >= 1 "
                             f"(got {self.num_cpu_blocks})")
        if self.load_failure_policy not in LOAD_FAILURE_POLICIES:
            raise ValueError("kv_connector.load_failure_policy: must be 'fail' or 'recompute' "
                             f"(got {self.load_failure_policy!r})")
        if self.backend not in OFFLOAD_BACKENDS:
            raise ValueError("kv_connector.backend: must be 'cpu' or 'disk' "
                             f"(got {self.backend!r})")

    @property
    def medium(self) -> str:
        """The medium of the tier's KV events."""
        return "STORAGE" if self.backend == "disk" else "CPU"

    @property
    def hit_source(self) -> CacheHitSource:
        """The source its hits are counted under in the connector's prefix-cache stats."""
        return CacheHitSource.DISK if self.backend == "disk" else CacheHitSource.HOST


@dataclass(frozen=True, slots=True)
class OffloadingSettings:
    """Upstream's OffloadingConnector (`--kv-offloading-size`) with its CPU backend.
    `num_cpu_chunks`: the CPU tier's size in chunks (upstream derives it from a byte budget;
    the twin takes the count). `blocks_per_chunk`: GPU blocks per offloaded chunk (the
    offloaded block size over the GPU's). `eviction_policy`: `lru` or `arc`.
    `store_threshold`: offers a chunk needs before it is stored (below 2: every offer).
    `offload_prompt_only`: store prompt chunks only (upstream's default).
    `self_describing_kv_events`: with KV events on, announce each chunk's per-block hashes,
    tokens and parent (`impl.connector.offloading.events`). `sync_load_budget_bytes`: KV bytes
    per step (per worker) loaded within the step instead of asynchronously (0: none; 0.33
    only, `impl.connector.offloading.sync_loads`)."""

    num_cpu_chunks: int
    blocks_per_chunk: int = 1
    eviction_policy: str = "lru"
    store_threshold: int = 0
    max_tracker_size: int = 64_000
    offload_prompt_only: bool = True
    self_describing_kv_events: bool = False
    sync_load_budget_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("num_cpu_chunks", "blocks_per_chunk", "max_tracker_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"kv_connector.{name}: must be >= 1 (got {getattr(self, name)})")
        if self.sync_load_budget_bytes < 0:
            raise ValueError("kv_connector.sync_load_budget_bytes: must be >= 0 "
                             f"(got {self.sync_load_budget_bytes})")
        if self.eviction_policy not in ("lru", "arc"):
            raise ValueError("kv_connector.eviction_policy: must be 'lru' or 'arc' "
                             f"(got {self.eviction_policy!r})")


@dataclass(frozen=True, slots=True)
class NixlSettings:
    """Upstream's NIXL connector (prefill/decode disaggregation) on one instance.
    `load_failure_policy`: what a failed transfer does to its request, as for the CPU tier.
    `transfer_mode`: `pull` (the decode side reads the prefill side's blocks) or `push` (the
    decode side registers its blocks and the prefill side writes into them)."""

    load_failure_policy: str = "fail"
    transfer_mode: str = "pull"
    bidirectional: bool = False
    """Turn-2 readback (upstream's `bidirectional_kv_xfer`, pull mode): a finished decode-side
    request keeps its blocks for the next turn's prefill to pull them back."""
    recompute_threshold: int = 64
    """With readback: a prefill pulls the decode side's tokens only if at least this many are
    missing locally (upstream's `kv_recompute_threshold`; 0: always)."""

    def __post_init__(self) -> None:
        if self.bidirectional and self.transfer_mode == "push":
            raise ValueError("kv_connector.bidirectional: upstream's push mode refuses "
                             "bidirectional KV transfer")
        if self.recompute_threshold < 0:
            raise ValueError("kv_connector.recompute_threshold: must be >= 0 (got "
                             f"{self.recompute_threshold})")
        if self.load_failure_policy not in LOAD_FAILURE_POLICIES:
            raise ValueError("kv_connector.load_failure_policy: must be 'fail' or 'recompute' "
                             f"(got {self.load_failure_policy!r})")
        if self.transfer_mode not in ("pull", "push"):
            raise ValueError("kv_connector.transfer_mode: must be 'pull' or 'push' "
                             f"(got {self.transfer_mode!r})")


@dataclass(frozen=True, slots=True)
class MultiSettings:
    """Upstream's MultiConnector over `parts`, in order: the first connector that claims a
    request's tokens loads them (`impl.connector.multi`). Modelled for the NIXL P/D connector
    with the OffloadingConnector."""

    parts: tuple[NixlSettings | OffloadingSettings, ...]

    def __post_init__(self) -> None:
        kinds = sorted(type(p).__name__ for p in self.parts)
        if kinds != ["NixlSettings", "OffloadingSettings"]:
            raise ValueError("kv_connector.connectors: a MultiConnector is modelled for one "
                             f"NIXL and one offloading connector (got {kinds})")


@dataclass(frozen=True, slots=True)
class OffloadLimits:
    """A request's own caps on the OffloadingConnector (upstream's experimental
    `kv_transfer_params` keys of the same names; None: no cap). `max_load_tokens`: tokens past
    the local hit a lookup may load (the hit is then cut to whole chunks);
    `max_offload_tokens`: the request's leading tokens the connector may store."""

    max_load_tokens: int | None = None
    max_offload_tokens: int | None = None


@dataclass(slots=True)
class RemoteTransfer:
    """A request's part in a prefill/decode pair (`impl.connector.nixl`), upstream's
    `kv_transfer_params`: `do_remote_prefill` on the decode side (pull the prompt's KV; cleared
    once the pull is ordered), `do_remote_decode` on the prefill side (keep the KV for the
    peer's read)."""

    do_remote_prefill: bool = False
    do_remote_decode: bool = False
    readback_tokens: int | None = None
    """A prefill-side request of a later turn: the tokens the decode side kept from the turn
    before (upstream's `remote_num_tokens` on a prefill's parameters; None: no readback)."""
    readback_ordered: bool = False  # its readback pull was ordered (once per request)
    prompt_tail_left: bool = False  # a prefill's prompt tail was left to the decode side


@dataclass(frozen=True, slots=True)
class FinishedTransfer:
    """What a finished prefill-side request hands its decode peer (upstream's returned
    `kv_transfer_params`): the blocks to read per group, the tokens they hold, and the prompt
    tokens its first scheduling found cached (None: not known when it finished, because an
    earlier output already reported its prefill)."""

    remote_block_ids: tuple[tuple[int, ...], ...]
    remote_num_tokens: int
    remote_prefill_cached_tokens: int | None = None
    readback: bool = False
    """A decode side's blocks kept for the next turn's prefill (`NixlSettings.bidirectional`),
    not a prefill's for its decode peer."""


@dataclass(slots=True)
class OffloadMetadata:
    """One step's transfers for the worker. At most one load event and one store event per
    step; each is a flat, index-parallel list of GPU and CPU block ids. `load_event_to_reqs`
    maps every load event still in flight to its requests (the worker reports finished loads by
    request). `need_flush`: a request was preempted this step, so every transfer in flight must
    finish before its blocks are reused."""

    load_event: int = NO_EVENT
    load_gpu_blocks: list[int] = field(default_factory=list)
    load_cpu_blocks: list[int] = field(default_factory=list)
    load_event_to_reqs: dict[int, list[str]] = field(default_factory=dict)
    store_event: int = NO_EVENT
    store_gpu_blocks: list[int] = field(default_factory=list)
    store_cpu_blocks: list[int] = field(default_factory=list)
    need_flush: bool = False


@dataclass(frozen=True, slots=True)
class KVConnectorOutput:
    """What the worker reports after a step. `finished_recving`: requests whose loads are done.
    `completed_store_events`: store event -> workers that finished it (one worker here).
    `completed_jobs`: the OffloadingConnector's jobs (loads and stores) -> workers that
    finished them, in the order they finished.
    `invalid_block_ids`: GPU blocks whose load failed (their KV is garbage). `failed_recving`:
    requests whose whole load failed."""

    finished_recving: frozenset[str] = frozenset()
    finished_sending: frozenset[str] = frozenset()
    completed_store_events: tuple[tuple[int, int], ...] = ()
    completed_jobs: tuple[tuple[int, int], ...] = ()
    invalid_block_ids: frozenset[int] = frozenset()
    failed_recving: frozenset[str] = frozenset()

    def is_empty(self) -> bool:
        return not (self.finished_recving or self.finished_sending
                    or self.completed_store_events or self.completed_jobs
                    or self.invalid_block_ids
                    or self.failed_recving)
