"""The in-memory form of a workload: what the scheduler twin and the harness consume.

Every record is a frozen, slotted dataclass so a loaded workload can be shared between the twin
and the upstream oracle without either side mutating what the other sees. Prompts are already
expanded to concrete token ids; the compact spec they came from is kept alongside (`prompt_spec`)
only so that `dump` can write the same small file back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from workloads.controls import ControlSpec
from workloads.grammar import GrammarSpec
from workloads.multimodal import MultimodalConfig, MultimodalItem
from workloads.offload_limits import OffloadLimitsSpec
from workloads.pd import KVTransferSpec, PDPairSpec
from workloads.repetition import RepetitionDetection
from workloads.streaming import StreamChunk

SpecMetricsLevel = Literal["none", "summary", "detailed"]
SpecMethod = Literal["ngram", "eagle", "mtp"]
KVCacheGroupType = Literal["full", "sliding_window", "chunked_local", "mamba", "reference_window",
                           "circular_buffer", "cross_attention"]
MambaCacheMode = Literal["none", "align"]
Policy = Literal["fcfs", "priority", "continuum"]
Estimator = Literal["fixed", "learned"]
HashAlgo = Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"]
Runner = Literal["generate", "pooling"]

DEFAULT_VOCAB_SIZE = 32000


@dataclass(frozen=True, slots=True)
class KVCacheGroup:
    """One KV-cache group: the attention kind shared by a set of layers.

    Only the field that belongs to `type` is set (`sliding_window` for sliding windows,
    `attention_chunk_size` for chunked local attention, `mamba_cache_mode` for mamba,
    `rswa_window` for a reference sliding window: the prompt stays visible, only the last
    `rswa_window` generated tokens are attended to); the schema enforces that.
    `mamba_cache_mode` None is "none" (one state per request; with
    prefix caching 0.32 caches a state at every block boundary); "align" caches states only
    at block-aligned chunk ends, and the scheduler splits prefill chunks to end there.
    A "circular_buffer" group is one block per request used as a ring (an indexer's scratch):
    no prefix cache, nothing skipped.
    A "cross_attention" group makes the model an encoder-decoder model (Whisper): the decoder's
    cross-attention KV, sized by the encoder's output (`workloads.encoder_decoder`).
    `bounded_replay` (sliding windows only, DeepSeek-V4.1 style): the group keeps no prefix
    cache of its own; after a prefix hit the scheduler recomputes the hit's last window to
    rebuild it (`impl.sched.replay`).
    """

    type: KVCacheGroupType = "full"
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mamba_cache_mode: MambaCacheMode | None = None
    rswa_window: int | None = None
    bounded_replay: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.sliding_window is not None:
            out["sliding_window"] = self.sliding_window
        if self.attention_chunk_size is not None:
            out["attention_chunk_size"] = self.attention_chunk_size
        if self.mamba_cache_mode is not None:
            out["mamba_cache_mode"] = self.mamba_cache_mode
        if self.rswa_window is not None:
            out["rswa_window"] = self.rswa_window
        if self.bounded_replay:
            out["bounded_replay"] = True
        return out


@dataclass(frozen=True, slots=True)
class ContinuumConfig:
    """Settings of the `continuum` policy (KV pinning across agent tool calls, seed 002).

    A finished non-final turn of a job keeps its KV blocks for a time-to-live when the tool
    call's predicted time is under `threshold_ms`: `fixed` predicts `ttl_ms` for every call,
    `learned` predicts each job's longest observed gap (`ttl_ms` until one is seen). Time is
    engine steps times `step_ms`, which comes from the workload header (files do not repeat it
    here), so the pins expire at the same step on every system.
    """

    ttl_ms: float = 1000.0
    estimator: Estimator = "fixed"
    threshold_ms: float = 2000.0
    step_ms: float = 20.0

    def to_dict(self) -> dict[str, Any]:
        return {"ttl_ms": self.ttl_ms, "estimator": self.estimator,
                "threshold_ms": self.threshold_ms}


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A planned load failure: the block at `block_index` of load event `load_event`'s block
    list arrives broken (the worker reports its GPU block id as invalid)."""

    load_event: int
    block_index: int

    def to_dict(self) -> dict[str, Any]:
        return {"load_event": self.load_event, "block_index": self.block_index}


@dataclass(frozen=True, slots=True)
class KVConnectorConfig:
    """A KV connector and how the harness's worker plays its transfers: a load or store issued
    in step s completes in the output of step s + latency (0: the same step), in order per
    kind.

    `type` "simple_cpu_offload": upstream's SimpleCPUOffloadConnector, a CPU tier of
    `num_cpu_blocks` blocks; `load_failures` plans broken blocks; `lazy_offload`: store blocks
    only as they near eviction; `backend` `disk`: the copies live on disk (upstream's
    `kv_offload_backend`; the scheduler side then reports medium STORAGE and disk hits);
    `load_failure_policy`: `fail` (upstream's default) errors the request, `recompute`
    recomputes from the first broken block.

    `type` "offloading": upstream's OffloadingConnector (`--kv-offloading-size`) with its CPU
    backend, `num_cpu_chunks` chunks of `offloaded_block_size` tokens (None: the GPU block
    size; else a multiple of it); `eviction_policy` lru | arc; `store_threshold`: offers a
    chunk needs before it is stored (below 2: every offer); `offload_prompt_only`: store
    prompt chunks only (upstream's default); `self_describing_kv_events`: its CPU tier's KV
    events carry each chunk's per-block hashes, tokens and parent (off by default);
    `sync_load_budget_bytes`: KV bytes per step loaded within the step, their requests
    scheduled at once (0.33; 0 or 0.32: every hit loads asynchronously; the harness's model
    takes 512 bytes per token per attention group: `docs/connectors.md`).

    `type` "multi": upstream's MultiConnector over `connectors` (a `nixl` and an `offloading`
    one, in either order: P/D with a CPU tier); the first that claims a request's tokens
    loads them.

    `type` "nixl": upstream's NIXL connector on one instance of a prefill/decode pair
    (`workloads.pd`); a request's pull lands `load_latency_steps` after it is asked for, a
    finished prefill's blocks are read by the peer `send_latency_steps` after they are
    announced; `load_failure_policy` as above, for pulls that fail. `transfer_mode` `push`:
    upstream's NixlPushConnector, where the decode side registers its blocks and the peer
    writes them (`load_latency_steps` after the registration is handed out), and a finished
    prefill's blocks are written to the decode peer (`send_latency_steps` after).
    `bidirectional` (pull mode): a finished decode request keeps its blocks, read by the
    modelled peer `send_latency_steps` later, and a prefill may read a decode side's tokens
    back (`kv_transfer.readback_tokens`) if at least `recompute_threshold` are missing."""

    type: Literal["simple_cpu_offload", "offloading", "nixl", "multi"] = "simple_cpu_offload"
    num_cpu_blocks: int = 1024
    lazy_offload: bool = False
    load_failure_policy: Literal["fail", "recompute"] = "fail"
    load_latency_steps: int = 1
    store_latency_steps: int = 1
    load_failures: tuple[LoadFailure, ...] = ()
    num_cpu_chunks: int = 1024
    offloaded_block_size: int | None = None
    eviction_policy: Literal["lru", "arc"] = "lru"
    store_threshold: int = 0
    offload_prompt_only: bool = True
    self_describing_kv_events: bool = False
    sync_load_budget_bytes: int = 0
    send_latency_steps: int = 1
    transfer_mode: Literal["pull", "push"] = "pull"
    bidirectional: bool = False
    recompute_threshold: int = 64
    connectors: tuple[KVConnectorConfig, ...] = ()  # type "multi": its connectors, in order
    backend: Literal["cpu", "disk"] = "cpu"  # type "simple_cpu_offload": where copies live

    def part(self, kind: str) -> KVConnectorConfig | None:
        """This connector if it is of type `kind`, or a MultiConnector's connector of that
        type (None: neither)."""
        if self.type == kind:
            return self
        return next((c for c in self.connectors if c.type == kind), None)

    def to_dict(self) -> dict[str, Any]:
        latency = {"load_latency_steps": self.load_latency_steps,
                   "store_latency_steps": self.store_latency_steps}
        if self.type == "multi":
            return {"type": self.type, "connectors": [c.to_dict() for c in self.connectors]}
        if self.type == "nixl":
            return {"type": self.type,
                    **({"transfer_mode": "push"} if self.transfer_mode == "push" else {}),
                    **({"bidirectional": True, "recompute_threshold": self.recompute_threshold}
                       if self.bidirectional else {}),
                    "load_failure_policy": self.load_failure_policy,
                    "load_latency_steps": self.load_latency_steps,
                    "send_latency_steps": self.send_latency_steps}
        if self.type == "offloading":
            return {"type": self.type, "num_cpu_chunks": self.num_cpu_chunks,
                    **({"offloaded_block_size": self.offloaded_block_size}
                       if self.offloaded_block_size is not None else {}),
                    "eviction_policy": self.eviction_policy,
                    "store_threshold": self.store_threshold,
                    "offload_prompt_only": self.offload_prompt_only,
                    **({"self_describing_kv_events": True}
                       if self.self_describing_kv_events else {}),
                    **({"sync_load_budget_bytes": self.sync_load_budget_bytes}
                       if self.sync_load_budget_bytes else {}), **latency}
        return {"type": self.type, "num_cpu_blocks": self.num_cpu_blocks,
                "lazy_offload": self.lazy_offload,
                **({"backend": "disk"} if self.backend == "disk" else {}),
                "load_failure_policy": self.load_failure_policy, **latency,
                **({"load_failures": [f.to_dict() for f in self.load_failures]}
                   if self.load_failures else {})}


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The engine settings a workload is meant to run under.

    `num_blocks` counts the null block 0, so `num_blocks - 1` blocks are usable, exactly as in
    vLLM's block pool. `long_prefill_token_threshold == 0` and `num_spec_tokens == 0` mean off.
    `hash_block_size` of None means "same as block_size". `num_lookahead_tokens` are KV slots
    reserved past the scheduled tokens for a drafter that writes ahead (EAGLE-style; 0: none).
    `prefill_schedule_interval` N > 1 lets prefill into a step only every N executed steps while
    requests decode (vLLM 0.33 applies it in one engine; 0.32 only across data-parallel ranks).
    `max_loras` > 0 limits the LoRA adapters among running requests (0: no LoRA config, no limit).
    `data_parallel`: the engine is one rank of a data-parallel deployment, whose engine core
    throttles prefill on the steps off its `prefill_schedule_interval` cadence (counted from the
    start of each busy period) instead of the engine holding prefill itself.
    `runner` "pooling" serves an embedding / pooling model: every request is prefill-only and
    finishes (stop) once its prompt is computed, with pooled output and no sampled token.
    `prefix_cache_retention_interval` (the engine's option of that name) decides which blocks of
    sliding-window and mamba groups are cached: None (the default here) every block that could
    serve a hit at some aligned length; 0 (vLLM's own default) only the tail that a replay of
    the prompt, or a shared prefix's junction, can reach. The CPU tier of the OffloadingConnector
    stores the same tails. Other values are not modelled.
    `enable_mamba_shared_prefix_checkpoint` (the engine's option of that name): mamba 'align'
    also keeps the state at a request's shared-prefix junction (where another group's hit ran
    past mamba's), the prompt chunk ending exactly there; in effect only with an EAGLE
    drafter, hashes finer than the mamba block and no MTP chain, as upstream narrows it.
    `spec_method` "eagle": the drafter is an EAGLE head (it writes the KV of the token after
    each chunk, so prefix hits give up their last block; `num_lookahead_tokens` is then
    `num_spec_tokens`); "mtp": the model's own multi-token-prediction modules, EAGLE's family,
    `mtp_modules` of them (upstream's `num_nextn_predict_layers`): with more than one (and
    more than one draft token) the chain reads `num_spec_tokens` prompt tokens past each
    chunk, so no chunk ends that close to the prefill's end and the last `num_spec_tokens - 1`
    computed tokens are not indexed yet; "ngram" (the default) drafts by prompt lookup.
    `decode_context_parallel_size` N > 1 (DCP) shards each sequence's KV over N ranks by token
    position, so one scheduler block of an attention group spans `block_size` x N tokens
    (`impl.core.context_parallel`).
    """

    model: str | None = None  # a model description the groups were planned from
    block_size: int = 16
    num_blocks: int = 1025
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    max_model_len: int = 2048
    long_prefill_token_threshold: int = 0
    # The threshold floored at a fair share of the budget (budget / queued and running).
    long_prefill_token_threshold_adaptive: bool = False
    enable_chunked_prefill: bool = True
    policy: Policy = "fcfs"
    enable_prefix_caching: bool = True
    hash_algo: HashAlgo = "sha256"
    kv_cache_groups: tuple[KVCacheGroup, ...] = (KVCacheGroup(),)
    num_spec_tokens: int = 0
    async_scheduling: bool = False
    hash_block_size: int | None = None
    num_lookahead_tokens: int = 0
    prefill_schedule_interval: int = 1
    max_loras: int = 0
    prefix_cache_retention_interval: int | None = None
    enable_mamba_shared_prefix_checkpoint: bool = False
    continuum: ContinuumConfig | None = None  # read only under policy "continuum"
    kv_connector: KVConnectorConfig | None = None  # None: no connector
    multimodal: MultimodalConfig | None = None  # None: a text-only model (no encoder)
    log_stats: bool = True  # False: the scheduler keeps and reports no stats
    runner: Runner = "generate"
    data_parallel: bool = False
    # Upstream's enable_logging_iteration_details: each step's encoder inputs counted.
    log_iteration_details: bool = False
    # Upstream's per_request_spec_decode_metrics: none | summary | detailed.
    per_request_spec_decode_metrics: SpecMetricsLevel = "none"
    spec_method: SpecMethod = "ngram"
    mtp_modules: int = 1  # spec_method "mtp": the draft model's MTP modules
    decode_context_parallel_size: int = 1

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - 1

    @property
    def scheduler_block_size(self) -> int:
        """Tokens per scheduler block: the block size times the DCP world size (full
        attention's blocks scale, a mamba group's stay and divide them)."""
        return self.block_size * self.decode_context_parallel_size

    @property
    def effective_hash_block_size(self) -> int:
        """The hash block: as set, else the gcd of the groups' blocks as the scheduler sees
        them (the block size itself beside a mamba group under DCP, else the scheduler's)."""
        if self.hash_block_size is not None:
            return self.hash_block_size
        if self.decode_context_parallel_size > 1 and any(
                g.type == "mamba" for g in self.kv_cache_groups):
            return self.block_size
        return self.scheduler_block_size

    @property
    def is_encoder_decoder(self) -> bool:
        """A cross-attention group: an encoder-decoder model (`workloads.encoder_decoder`)."""
        return any(g.type == "cross_attention" for g in self.kv_cache_groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"model": self.model} if self.model is not None else {}),
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_model_len": self.max_model_len,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "policy": self.policy,
            "enable_prefix_caching": self.enable_prefix_caching,
            "hash_algo": self.hash_algo,
            "kv_cache_groups": [g.to_dict() for g in self.kv_cache_groups],
            "num_spec_tokens": self.num_spec_tokens,
            "async_scheduling": self.async_scheduling,
            "hash_block_size": self.hash_block_size,
            "num_lookahead_tokens": self.num_lookahead_tokens,
            "prefill_schedule_interval": self.prefill_schedule_interval,
            "max_loras": self.max_loras,
            # Left out when unset, so files of the other policies keep their exact bytes.
            **({"continuum": self.continuum.to_dict()} if self.continuum is not None else {}),
            **({"kv_connector": self.kv_connector.to_dict()}
               if self.kv_connector is not None else {}),
            **({"multimodal": self.multimodal.to_dict()}
               if self.multimodal is not None else {}),
            **({"log_stats": False} if not self.log_stats else {}),
            **({"runner": self.runner} if self.runner != "generate" else {}),
            **({"data_parallel": True} if self.data_parallel else {}),
            **({"log_iteration_details": True} if self.log_iteration_details else {}),
            **({"per_request_spec_decode_metrics": self.per_request_spec_decode_metrics}
               if self.per_request_spec_decode_metrics != "none" else {}),
            **({"spec_method": self.spec_method} if self.spec_method != "ngram" else {}),
            **({"mtp_modules": self.mtp_modules} if self.mtp_modules != 1 else {}),
            **({"prefix_cache_retention_interval": self.prefix_cache_retention_interval}
               if self.prefix_cache_retention_interval is not None else {}),
            **({"enable_mamba_shared_prefix_checkpoint": True}
               if self.enable_mamba_shared_prefix_checkpoint else {}),
            **({"long_prefill_token_threshold_adaptive": True}
               if self.long_prefill_token_threshold_adaptive else {}),
            **({"decode_context_parallel_size": self.decode_context_parallel_size}
               if self.decode_context_parallel_size != 1 else {}),
        }


@dataclass(frozen=True, slots=True)
class Segment:
    """A named run of tokens. Equal keys give equal tokens, which is how prompts share prefixes.

    A shorter segment with the same key is a prefix of a longer one.
    """

    key: str
    length: int


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """A compact prompt: `segments` in order, then unique filler up to `length` tokens.

    The filler is keyed by the request id, so it is shared with no other request.
    """

    length: int
    segments: tuple[Segment, ...] = ()


def gap_steps(gap_ms: float, step_ms: float) -> int:
    """Whole engine steps in a gap (floor, as `arrival_ms` converts): a request `after` R
    arrives at R's finishing step + 1 + this."""
    return int(gap_ms // step_ms)


@dataclass(frozen=True, slots=True)
class AfterSpec:
    """Closed-loop arrival: the request arrives `gap_ms` after `request_id` finishes (an agent's
    next turn after a tool call), and its prompt extends that request's prompt and output."""

    request_id: str
    gap_ms: float


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request arrival. `arrival_step` is the engine step at which it is added; with
    `after` set it is only the earliest step it can arrive (the driver adds it once its
    predecessor finishes), and `prompt_token_ids` are the new tokens that follow the
    predecessor's prompt and output. `job_id` groups the turns of one agent job;
    `is_last_step` is false on turns a tool call follows. `mm_items` are the prompt's
    multimodal inputs (placeholder ranges with an identifier)."""

    request_id: str
    arrival_step: int
    prompt_token_ids: tuple[int, ...] = field(repr=False)
    max_tokens: int
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    eos_token_id: int | None = None
    ignore_eos: bool = False
    priority: int = 0
    cache_salt: str | None = None
    lora_name: str | None = None
    prompt_spec: PromptSpec | None = None
    job_id: str | None = None
    is_last_step: bool = True
    after: AfterSpec | None = None
    mm_items: tuple[MultimodalItem, ...] = ()  # sorted by offset (`workloads.multimodal`)
    # A streaming-input session (`workloads.streaming`): later input parts, and the step the
    # client closes it (None: an ordinary request).
    stream: tuple[StreamChunk, ...] = ()
    stream_end_step: int | None = None
    # What the driver hands a system for a session's later parts and its close: a resumable
    # request under the same id (a part), or a non-resumable empty one (the close).
    resumable: bool = False
    grammar: GrammarSpec | None = None  # structured output (`workloads.grammar`)
    # KV events in "full" mode (upstream's `kv_cache_report_mode` sampling extra): each
    # prefix-cache lookup that hits announces the reused blocks as stored.
    kv_cache_report_mode: Literal["incremental", "full"] = "incremental"
    kv_transfer: KVTransferSpec | None = None  # a P/D request (`workloads.pd`)
    offload_limits: OffloadLimitsSpec | None = None  # `workloads.offload_limits`
    repetition_detection: RepetitionDetection | None = None  # `workloads.repetition`

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """The client aborts `request_id` at engine step `step` (no earlier than its arrival)."""

    request_id: str
    step: int


@dataclass(frozen=True, slots=True)
class PlanSpec:
    """What the token model does for one request.

    `eos_at` is the output index at which the model emits the EOS token (None: never).
    `spec_acceptance[i]` is how many draft tokens the verifier accepts at the i-th decode step;
    steps past the end accept none.
    """

    request_id: str
    eos_at: int | None = None
    spec_acceptance: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """A complete workload: engine config plus the timeline of client events.

    `requests` are sorted by arrival step (ties keep file order), `plans` follow request order
    and `aborts` are sorted by step. `step_ms`, when set, is how many milliseconds one engine
    step stands for; it only matters for reporting rates and for `arrival_ms` in files.
    """

    name: str
    description: str
    config: EngineConfig
    requests: tuple[RequestSpec, ...]
    aborts: tuple[AbortSpec, ...] = ()
    plans: tuple[PlanSpec, ...] = ()
    vocab_size: int = DEFAULT_VOCAB_SIZE
    token_seed: int = 0
    step_ms: float | None = None
    controls: tuple[ControlSpec, ...] = ()  # operations between steps, by step
    pd_pair: PDPairSpec | None = None  # two instances behind a router (`workloads.pd_pair`)

    def __post_init__(self) -> None:
        steps = [r.arrival_step for r in self.requests]
        if steps != sorted(steps):
            raise ValueError("Workload.requests must be sorted by arrival_step")
        continuum = self.config.continuum
        if continuum is not None and continuum.step_ms != self.step_ms:
            raise ValueError(f"config.continuum.step_ms {continuum.step_ms} differs from the "
                             f"workload's step_ms {self.step_ms}")

    def plan_for(self, request_id: str) -> PlanSpec | None:
        for plan in self.plans:
            if plan.request_id == request_id:
                return plan
        return None

    def plans_by_request(self) -> dict[str, PlanSpec]:
        return {p.request_id: p for p in self.plans}
