"""What the scheduler hands the model runner each step, and what comes back.

`NewRequestData` carries everything a worker needs the first time it sees a request;
`CachedRequestData` only the difference for requests it already holds (resumed requests replace
their block table instead of appending to it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from impl.connector.types import KVConnectorOutput, OffloadMetadata

#: A draft token whose id is not known when its slot is scheduled (filled in by the worker).
PLACEHOLDER_DRAFT = -1


@dataclass(slots=True)
class NewRequestData:
    req_id: str
    prompt_token_ids: tuple[int, ...]
    """The request's own prompt tuple (immutable, so shared rather than copied)."""
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    lora_name: str | None = None


@dataclass(slots=True)
class CachedRequestData:
    req_ids: list[str] = field(default_factory=list)
    resumed_req_ids: set[str] = field(default_factory=set)
    new_token_ids: list[list[int]] = field(default_factory=list)
    # Full token ids of requests the worker did not see in the previous step.
    all_token_ids: dict[str, list[int]] = field(default_factory=dict)
    new_block_ids: list[tuple[list[int], ...] | None] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)
    num_output_tokens: list[int] = field(default_factory=list)

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)


@dataclass(slots=True)
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    finished_req_ids: set[str]
    preempted_req_ids: set[str] | None = None
    num_common_prefix_blocks: list[int] = field(default_factory=list)
    # What the KV connector wants the worker to move this step (None: no connector).
    kv_connector_metadata: OffloadMetadata | None = None


@dataclass(frozen=True, slots=True)
class ModelRunnerOutput:
    """Sampled tokens per scheduled request (accepted drafts + one bonus token in spec decode)."""

    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]]
    # The worker's connector report: transfers finished or failed (None: nothing to report).
    kv_connector_output: KVConnectorOutput | None = None


@dataclass(frozen=True, slots=True)
class DraftTokenIds:
    req_ids: list[str]
    draft_token_ids: list[list[int]]


@dataclass(slots=True)
class EngineCoreOutput:
    """One request's result of a step. Built for every request every step, so it must be
    cheap: a slotted (not frozen) dataclass, which mypyc compiles to a native class (~30 ns to
    build, where a NamedTuple's interpreted `__new__` costs ~300 ns from compiled code)."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | None = None
