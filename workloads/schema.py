"""The workload file format, version 1, as pydantic models.

A workload file is JSON Lines. Line 1 is the header; every later line is one event record whose
``type`` is ``request``, ``abort`` or ``plan``. The models check shapes, types and ranges; rules
that relate records to each other or to the header (duplicate ids, token ids below the
vocabulary size, aborts after arrival) live in `workloads.checks`, which knows the line numbers.

The models are strict: ``"5"`` is not an int, ``true`` is not 1 and unknown fields are errors,
because a typo in a hand-written case should fail loudly rather than fall back to a default.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

FORMAT_NAME = "vtwin-workload"
FORMAT_VERSION = 1
RECORD_TYPES = ("request", "abort", "plan", "control")

NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
Name = Annotated[str, Field(min_length=1, max_length=256)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class KVCacheGroupModel(_Strict):
    type: Literal["full", "sliding_window", "chunked_local", "mamba", "reference_window",
                  "circular_buffer", "cross_attention"]
    sliding_window: PosInt | None = None
    attention_chunk_size: PosInt | None = None
    mamba_cache_mode: Literal["none", "align"] | None = None
    rswa_window: PosInt | None = None
    bounded_replay: bool = False

    @model_validator(mode="after")
    def _fields_match_type(self) -> KVCacheGroupModel:
        if self.bounded_replay and self.type != "sliding_window":
            raise ValueError(f"a {self.type!r} group must not set 'bounded_replay' (sliding "
                             "windows only)")
        if self.mamba_cache_mode is not None and self.type != "mamba":
            raise ValueError(f"a {self.type!r} group must not set 'mamba_cache_mode'")
        wants_window = self.type == "sliding_window"
        wants_chunk = self.type == "chunked_local"
        if wants_window != (self.sliding_window is not None):
            verb = "needs" if wants_window else "must not set"
            raise ValueError(f"a {self.type!r} group {verb} 'sliding_window'")
        if wants_chunk != (self.attention_chunk_size is not None):
            verb = "needs" if wants_chunk else "must not set"
            raise ValueError(f"a {self.type!r} group {verb} 'attention_chunk_size'")
        wants_rswa = self.type == "reference_window"
        if wants_rswa != (self.rswa_window is not None):
            verb = "needs" if wants_rswa else "must not set"
            raise ValueError(f"a {self.type!r} group {verb} 'rswa_window'")
        return self


def _one_full_group() -> list[KVCacheGroupModel]:
    return [KVCacheGroupModel(type="full")]


Millis = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ContinuumModel(_Strict):
    ttl_ms: Millis = 1000.0
    estimator: Literal["fixed", "learned"] = "fixed"
    threshold_ms: Millis = 2000.0


class LoadFailureModel(_Strict):
    load_event: NonNegInt
    block_index: NonNegInt


class KVConnectorModel(_Strict):
    type: Literal["simple_cpu_offload"]
    num_cpu_blocks: PosInt
    lazy_offload: bool = False
    backend: Literal["cpu", "disk"] = "cpu"
    load_failure_policy: Literal["fail", "recompute"] = "fail"
    load_latency_steps: NonNegInt = 1
    store_latency_steps: NonNegInt = 1
    load_failures: list[LoadFailureModel] = Field(default_factory=list)


class OffloadingModel(_Strict):
    type: Literal["offloading"]
    num_cpu_chunks: PosInt
    offloaded_block_size: PosInt | None = None
    eviction_policy: Literal["lru", "arc"] = "lru"
    store_threshold: NonNegInt = 0
    offload_prompt_only: bool = True
    self_describing_kv_events: bool = False
    sync_load_budget_bytes: NonNegInt = 0
    load_latency_steps: NonNegInt = 1
    store_latency_steps: NonNegInt = 1


class NixlModel(_Strict):
    type: Literal["nixl"]
    transfer_mode: Literal["pull", "push"] = "pull"
    bidirectional: bool = False
    recompute_threshold: NonNegInt = 64
    load_failure_policy: Literal["fail", "recompute"] = "fail"
    load_latency_steps: NonNegInt = 1
    send_latency_steps: NonNegInt = 1


class MultiModel(_Strict):
    """Upstream's MultiConnector over connectors in order (the first that claims a request's
    tokens loads them)."""

    type: Literal["multi"]
    connectors: Annotated[list[Annotated[NixlModel | OffloadingModel,
                                         Field(discriminator="type")]],
                          Field(min_length=2, max_length=2)]


class PDPairDecodeModel(_Strict):
    num_blocks: Annotated[int, Field(ge=2)] | None = None
    max_num_seqs: PosInt | None = None
    max_num_batched_tokens: PosInt | None = None


class PDPairModel(_Strict):
    router_latency_steps: NonNegInt = 0
    decode: PDPairDecodeModel = Field(default_factory=PDPairDecodeModel)


class KVTransferModel(_Strict):
    role: Literal["prefill", "decode"]
    load_fails: bool = False
    pull_lost: bool = False
    readback_tokens: PosInt | None = None


class RepetitionDetectionModel(_Strict):
    max_pattern_size: NonNegInt = 0
    min_pattern_size: NonNegInt = 0
    min_count: NonNegInt = 0


class OffloadLimitsModel(_Strict):
    max_load_tokens: NonNegInt | None = None
    max_offload_tokens: NonNegInt | None = None


class MultimodalModel(_Strict):
    max_num_encoder_input_tokens: PosInt = 2048
    encoder_cache_size: PosInt = 2048
    disable_chunked_mm_input: bool = False
    max_tokens_per_item: NonNegInt | None = None


class MultimodalItemModel(_Strict):
    identifier: Name
    offset: NonNegInt
    length: PosInt
    is_embed: list[bool] | None = None
    modality: Literal["image", "audio", "video"] = "image"


class EngineConfigModel(_Strict):
    model: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    block_size: PosInt = 16
    num_blocks: Annotated[int, Field(ge=2)] = 1025
    max_num_seqs: PosInt = 16
    max_num_batched_tokens: PosInt = 2048
    max_model_len: PosInt = 2048
    long_prefill_token_threshold: NonNegInt = 0
    long_prefill_token_threshold_adaptive: bool = False
    enable_chunked_prefill: bool = True
    policy: Literal["fcfs", "priority", "continuum"] = "fcfs"
    enable_prefix_caching: bool = True
    hash_algo: Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"] = "sha256"
    kv_cache_groups: Annotated[list[KVCacheGroupModel], Field(min_length=1)] = Field(
        default_factory=_one_full_group
    )
    num_spec_tokens: NonNegInt = 0
    async_scheduling: bool = False
    hash_block_size: PosInt | None = None
    num_lookahead_tokens: NonNegInt = 0
    prefill_schedule_interval: PosInt = 1
    max_loras: NonNegInt = 0
    prefix_cache_retention_interval: NonNegInt | None = None
    enable_mamba_shared_prefix_checkpoint: bool = False
    continuum: ContinuumModel | None = None
    kv_connector: Annotated[KVConnectorModel | OffloadingModel | NixlModel | MultiModel,
                            Field(discriminator="type")] | None = None
    multimodal: MultimodalModel | None = None
    log_stats: bool = True
    runner: Literal["generate", "pooling"] = "generate"
    data_parallel: bool = False
    log_iteration_details: bool = False
    per_request_spec_decode_metrics: Literal["none", "summary", "detailed"] = "none"
    spec_method: Literal["ngram", "eagle", "mtp"] = "ngram"
    mtp_modules: PosInt = 1
    decode_context_parallel_size: PosInt = 1


class HeaderModel(_Strict):
    type: Literal["header"]
    format: Literal["vtwin-workload"]
    version: Literal[1]
    name: Name
    description: Annotated[str, Field(max_length=4096)] = ""
    vocab_size: Annotated[int, Field(ge=2, le=1 << 31)] = 32000
    token_seed: NonNegInt = 0
    step_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    config: EngineConfigModel = Field(default_factory=EngineConfigModel)
    pd_pair: PDPairModel | None = None


class SegmentModel(_Strict):
    key: Name
    length: PosInt


class PromptSpecModel(_Strict):
    length: PosInt | None = None
    segments: list[SegmentModel] = Field(default_factory=list)


class AfterModel(_Strict):
    request_id: Name
    gap_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class StreamChunkModel(_Strict):
    arrival_step: NonNegInt
    prompt_token_ids: Annotated[list[NonNegInt], Field(min_length=1)]
    max_tokens: PosInt


class GrammarModel(_Strict):
    allowed: Annotated[list[NonNegInt], Field(min_length=2, max_length=2)]
    compile_steps: NonNegInt = 0
    fails: bool = False


class RequestModel(_Strict):
    type: Literal["request"]
    request_id: Name
    arrival_step: NonNegInt | None = None
    arrival_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    prompt_token_ids: Annotated[list[NonNegInt], Field(min_length=1)] | None = None
    prompt: PromptSpecModel | None = None
    max_tokens: PosInt
    min_tokens: NonNegInt = 0
    stop_token_ids: list[NonNegInt] = Field(default_factory=list)
    eos_token_id: NonNegInt | None = None
    ignore_eos: bool = False
    priority: int = 0
    cache_salt: Annotated[str, Field(min_length=1)] | None = None
    lora_name: Name | None = None
    job_id: Name | None = None
    is_last_step: bool = True
    after: AfterModel | None = None
    mm_items: list[MultimodalItemModel] = Field(default_factory=list)
    stream: list[StreamChunkModel] = Field(default_factory=list)
    stream_end_step: NonNegInt | None = None
    grammar: GrammarModel | None = None
    kv_cache_report_mode: Literal["incremental", "full"] = "incremental"
    kv_transfer: KVTransferModel | None = None
    offload_limits: OffloadLimitsModel | None = None
    repetition_detection: RepetitionDetectionModel | None = None


class AbortModel(_Strict):
    type: Literal["abort"]
    request_id: Name
    step: NonNegInt


class PlanModel(_Strict):
    type: Literal["plan"]
    request_id: Name
    eos_at: NonNegInt | None = None
    spec_acceptance: list[NonNegInt] | None = None


class ControlModel(_Strict):
    type: Literal["control"]
    step: NonNegInt
    action: Literal["reset_prefix_cache", "reset_encoder_cache", "pause", "unpause"]
    preempt_running: bool = False
    mode: Literal["new", "all"] | None = None
    reset_connector: bool = False


RecordModel = RequestModel | AbortModel | PlanModel | ControlModel
RECORD_MODELS: MappingProxyType[str, type[RecordModel]] = MappingProxyType(
    {"request": RequestModel, "abort": AbortModel, "plan": PlanModel, "control": ControlModel}
)
