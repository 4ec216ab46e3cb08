"""What the scheduler hands the model runner each step, and what comes back.

`NewRequestData` carries everything a worker needs the first time it sees a request;
`CachedRequestData` only the difference for requests it already holds (resumed requests replace
their block table instead of appending to it).

The records built every step spell out their `__init__`: compiled, a dataclass's generated
`__init__` stays an interpreted function that each construction calls through (perf over a
whole-trace replay: 10% of the samples under `slot_tp_init`); one written in the class body is
compiled with it. They are `@dataclass(init=False)`: the `__init__` is the one place their
defaults live, and the dataclass still supplies equality and repr.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from impl.connector.multi_metadata import MultiMetadata
from impl.connector.nixl_metadata import NixlMetadata
from impl.connector.offloading.jobs import OffloadingMetadata
from impl.connector.types import FinishedTransfer, KVConnectorOutput, OffloadMetadata
from impl.sched.spec_stats import RequestSpecMetrics

if TYPE_CHECKING:
    from impl.core.mamba_boundaries import BoundaryState

#: A draft token whose id is not known when its slot is scheduled (filled in by the worker).
PLACEHOLDER_DRAFT = -1


ConnectorMetadata = OffloadMetadata | OffloadingMetadata | NixlMetadata | MultiMetadata
"""What a connector hands its worker each step (one type per connector)."""


@dataclass(slots=True, init=False)
class NewRequestData:
    req_id: str
    prompt_token_ids: tuple[int, ...]
    """The request's own prompt tuple (immutable, so shared rather than copied)."""
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    lora_name: str | None
    replay_start: int
    """Bounded replay: where the recomputed tail of the prefix hit starts (0: none)."""

    def __init__(self, req_id: str, prompt_token_ids: tuple[int, ...],
                 block_ids: tuple[list[int], ...], num_computed_tokens: int,
                 lora_name: str | None = None, replay_start: int = 0) -> None:
        self.req_id = req_id
        self.prompt_token_ids = prompt_token_ids
        self.block_ids = block_ids
        self.num_computed_tokens = num_computed_tokens
        self.lora_name = lora_name
        self.replay_start = replay_start


@dataclass(slots=True, init=False)
class CachedRequestData:
    req_ids: list[str]
    resumed_req_ids: set[str]
    new_token_ids: list[list[int]]
    # Full token ids of requests the worker did not see in the previous step.
    all_token_ids: dict[str, list[int]]
    new_block_ids: list[tuple[list[int], ...] | None]
    num_computed_tokens: list[int]
    num_output_tokens: list[int]

    def __init__(self, req_ids: list[str] | None = None,
                 resumed_req_ids: set[str] | None = None,
                 new_token_ids: list[list[int]] | None = None,
                 all_token_ids: dict[str, list[int]] | None = None,
                 new_block_ids: list[tuple[list[int], ...] | None] | None = None,
                 num_computed_tokens: list[int] | None = None,
                 num_output_tokens: list[int] | None = None) -> None:
        """Each field empty unless given (the scheduler appends each request's entries)."""
        self.req_ids = [] if req_ids is None else req_ids
        self.resumed_req_ids = set() if resumed_req_ids is None else resumed_req_ids
        self.new_token_ids = [] if new_token_ids is None else new_token_ids
        self.all_token_ids = {} if all_token_ids is None else all_token_ids
        self.new_block_ids = [] if new_block_ids is None else new_block_ids
        self.num_computed_tokens = [] if num_computed_tokens is None else num_computed_tokens
        self.num_output_tokens = [] if num_output_tokens is None else num_output_tokens

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)


@dataclass(slots=True, init=False)
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    finished_req_ids: set[str]
    preempted_req_ids: set[str] | None
    num_common_prefix_blocks: list[int]
    # What the KV connector wants the worker to move this step (None: no connector).
    kv_connector_metadata: ConnectorMetadata | None
    # Multimodal: the items each request encodes this step (indices into its features), and
    # encoder-cache entries evicted since the last step, for the worker to drop.
    scheduled_encoder_inputs: dict[str, list[int]]
    free_encoder_mm_hashes: list[str]
    # With iteration details logged: (encoder inputs, their embeddings) this step schedules
    # (None: details off, or no input scheduled).
    scheduled_encoder_input_stats: tuple[int, int] | None
    # Structured output under async scheduling: a scheduled request with a grammar has a step
    # in flight, so its bitmask (and its drafts) wait for that step's output; drafts the
    # grammar then rejected, per request (they stay scheduled as -1).
    pending_structured_output_tokens: bool
    num_invalid_spec_tokens: dict[str, int]
    # Sub-block hits: (source, copy) block ids the worker copies before this step's forward
    # (`impl.core.partial_hits`); empty without.
    kv_cache_block_copies: list[tuple[int, int]]
    # With a KV connector: the mamba 'align' states the cache keyed this step, for the
    # connector to store by block (`impl.core.mamba_align.BoundaryState`); empty without.
    boundary_states: list[BoundaryState]
    # A request admitted this step loads KV from a connector within the step: the worker
    # waits for those loads before the forward instead of overlapping them with it.
    has_sync_kv_loads: bool

    def __init__(self, scheduled_new_reqs: list[NewRequestData],
                 scheduled_cached_reqs: CachedRequestData, num_scheduled_tokens: dict[str, int],
                 total_num_scheduled_tokens: int,
                 scheduled_spec_decode_tokens: dict[str, list[int]], finished_req_ids: set[str],
                 preempted_req_ids: set[str] | None = None,
                 num_common_prefix_blocks: list[int] | None = None,
                 kv_connector_metadata: ConnectorMetadata | None = None,
                 has_sync_kv_loads: bool = False) -> None:
        self.scheduled_new_reqs = scheduled_new_reqs
        self.scheduled_cached_reqs = scheduled_cached_reqs
        self.num_scheduled_tokens = num_scheduled_tokens
        self.total_num_scheduled_tokens = total_num_scheduled_tokens
        self.scheduled_spec_decode_tokens = scheduled_spec_decode_tokens
        self.finished_req_ids = finished_req_ids
        self.preempted_req_ids = preempted_req_ids
        self.num_common_prefix_blocks = ([] if num_common_prefix_blocks is None
                                         else num_common_prefix_blocks)
        self.kv_connector_metadata = kv_connector_metadata
        self.scheduled_encoder_inputs = {}
        self.free_encoder_mm_hashes = []
        self.scheduled_encoder_input_stats = None
        self.pending_structured_output_tokens = False
        self.num_invalid_spec_tokens = {}
        self.kv_cache_block_copies = []
        self.boundary_states = []
        self.has_sync_kv_loads = has_sync_kv_loads


@dataclass(frozen=True, slots=True)
class ModelRunnerOutput:
    """Sampled tokens per scheduled request (accepted drafts + one bonus token in spec decode)."""

    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]
    # The worker's connector report: transfers finished or failed (None: nothing to report).
    kv_connector_output: KVConnectorOutput | None = None
    # A pooling model: the requests whose pooled output this step produced (their prompt is
    # computed); they sample nothing.
    pooled_req_ids: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DraftTokenIds:
    req_ids: list[str]
    draft_token_ids: list[list[int]]


@dataclass(slots=True, init=False)
class EngineCoreOutput:
    """One request's result of a step. Built for every request every step, so it must be
    cheap: a slotted (not frozen) dataclass with its own `__init__`, compiled to a native class
    and constructor (a NamedTuple's interpreted `__new__` cost ~300 ns from compiled code)."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None  # "stop" | "length" | "abort"
    stop_reason: int | str | None
    # A finished prefill-side P/D request: what its decode peer needs (`impl.connector.nixl`).
    kv_transfer_params: FinishedTransfer | None
    # A finished request's speculative-decoding metrics (per_request_spec_decode_metrics).
    spec_metrics: RequestSpecMetrics | None

    def __init__(self, request_id: str, new_token_ids: list[int],
                 finish_reason: str | None = None, stop_reason: int | str | None = None,
                 kv_transfer_params: FinishedTransfer | None = None,
                 spec_metrics: RequestSpecMetrics | None = None) -> None:
        self.request_id = request_id
        self.new_token_ids = new_token_ids
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.kv_transfer_params = kv_transfer_params
        self.spec_metrics = spec_metrics
