"""`SchedulerConfig`: the engine settings the scheduler twin runs under."""

from __future__ import annotations

from dataclasses import dataclass

from impl.behaviour import DEFAULT_BEHAVIOUR, Behaviour
from impl.connector.types import (
    MultiSettings,
    NixlSettings,
    OffloadingSettings,
    OffloadSettings,
)
from impl.core.specs import ChunkedLocalAttentionSpec, KVCacheConfig, MambaSpec
from impl.sched.continuum.settings import ContinuumSettings


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    long_prefill_token_threshold: int = 0  # 0: no cap on one request's chunk
    # The cap floored at a fair share of the budget (max_num_batched_tokens / requests).
    long_prefill_token_threshold_adaptive: bool = False
    enable_chunked_prefill: bool = True
    policy: str = "fcfs"  # fcfs | priority | continuum
    num_spec_tokens: int = 0  # 0: no speculative decoding
    num_lookahead_tokens: int = 0  # KV slots past the scheduled tokens for a drafter (EAGLE)
    # The drafter: "ngram" (prompt lookup), "eagle" (a draft head on the target's hidden
    # states; its prefix-cache hits give up their last block, `impl.core.hit_search`) or "mtp"
    # (the model's own multi-token-prediction modules, EAGLE's family), of which there are
    # `num_mtp_modules` (the draft config's `num_nextn_predict_layers`).
    spec_method: str = "ngram"
    num_mtp_modules: int = 1
    async_scheduling: bool = False
    enable_prefix_caching: bool = True
    hash_algo: str = "sha256"
    block_size: int = 16
    hash_block_size: int | None = None  # None: the block size
    # Mamba 'align' also keeps the state at a request's shared-prefix junction (the engine's
    # option; in effect only with EAGLE and sub-block hits: `manager_rules`).
    enable_mamba_shared_prefix_checkpoint: bool = False
    # Admit a waiting request only if its whole prompt fits in the free blocks, not just its
    # first chunk (upstream 0.32's default), so chunked admission does not lead to preemption.
    scheduler_reserve_full_isl: bool = True
    # Publish prefix-cache events (stored / removed / cleared) for KV-aware routers; off by
    # default as upstream's KVEventsConfig.
    enable_kv_cache_events: bool = False
    # At most this many LoRA adapters among the running requests (0: no limit, no LoRA config).
    max_loras: int = 0
    # Prefill only every N executed steps while requests decode (from 0.33; `prefill_cadence`).
    prefill_schedule_interval: int = 1
    # Which upstream release's behaviour to reproduce where releases differ (`impl.behaviour`).
    behaviour: Behaviour = DEFAULT_BEHAVIOUR
    # KV pinning across agent tool calls (`impl.sched.continuum`); read under policy continuum.
    continuum: ContinuumSettings | None = None
    # A CPU offload tier behind the KV connector interface (`impl.connector`): the
    # SimpleCPUOffloadConnector's or the OffloadingConnector's; None: no connector.
    kv_connector: (OffloadSettings | OffloadingSettings | NixlSettings | MultiSettings
                   | None) = None
    # Multimodal models: embeddings the encoder may compute per step and the encoder cache's
    # size (0: a text-only model); whether a chunk may end inside an item's placeholders.
    max_num_encoder_input_tokens: int = 0
    encoder_cache_size: int = 0
    disable_chunked_mm_input: bool = False
    # The model's largest multimodal item, from its registry: the engine raises the budget and
    # cache to it (`impl.sched.encoder_budget`); None: the two sizes are used as given.
    mm_max_tokens_per_item: int | None = None
    # Tokens a step samples after a request's input: 1, or 0 for a pooling model (its requests
    # end with pooled output, so a prompt may fill the whole context).
    num_sampled_tokens_per_step: int = 1
    # Per-iteration details for the engine's logs (upstream's observability option
    # enable_logging_iteration_details): with stats on, each output counts the encoder inputs
    # it schedules and their embeddings.
    log_iteration_details: bool = False
    # Per-request speculative-decoding metrics on each finished request's output (upstream's
    # per_request_spec_decode_metrics): none | summary | detailed (per-step counts too).
    per_request_spec_decode_metrics: str = "none"
    # Decode context parallelism: attention KV sharded over this many ranks by position, so a
    # full-attention block spans block_size x N tokens (`impl.core.context_parallel`).
    decode_context_parallel_size: int = 1

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size",
                     "prefill_schedule_interval", "decode_context_parallel_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1 (got {getattr(self, name)})")
        for name in ("long_prefill_token_threshold", "num_spec_tokens", "num_lookahead_tokens",
                     "max_num_encoder_input_tokens", "encoder_cache_size", "max_loras"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0 (got {getattr(self, name)})")
        if self.policy not in ("fcfs", "priority", "continuum"):
            raise ValueError("policy: must be 'fcfs', 'priority' or 'continuum' "
                             f"(got {self.policy!r})")
        if self.spec_method not in ("ngram", "eagle", "mtp"):
            raise ValueError("spec_method: must be 'ngram', 'eagle' or 'mtp' "
                             f"(got {self.spec_method!r})")
        if self.num_mtp_modules < 1:
            raise ValueError(f"num_mtp_modules: must be >= 1 (got {self.num_mtp_modules})")
        if self.policy == "continuum" and self.async_scheduling:
            raise ValueError("policy: 'continuum' is not implemented with async scheduling")
        if self.per_request_spec_decode_metrics != "none" and not self.num_spec_tokens:
            raise ValueError("per_request_spec_decode_metrics: needs speculative decoding "
                             "(num_spec_tokens > 0), as upstream requires")
        parts = (self.kv_connector.parts if isinstance(self.kv_connector, MultiSettings)
                 else (self.kv_connector,))
        if self.decode_context_parallel_size > 1 and any(isinstance(part, NixlSettings)
                                                         for part in parts):
            raise ValueError("decode_context_parallel_size: upstream refuses P/D (the NIXL "
                             "connector) with DCP for models other than MLA ones")

    @property
    def max_in_flight_tokens(self) -> int:
        """Tokens scheduled but not yet processed, at most: a batch's budget per batch in
        flight (two under async scheduling, whose batch queue overlaps two steps)."""
        return (2 if self.async_scheduling else 1) * self.max_num_batched_tokens

    @property
    def use_eagle(self) -> bool:
        """An EAGLE drafter is on."""
        return self.spec_method in ("eagle", "mtp") and self.num_spec_tokens > 0

    @property
    def num_prefill_lookahead(self) -> int:
        """Prompt tokens past a chunk the drafter reads: 1 for an EAGLE head (and a single MTP
        module), `num_spec_tokens` for a chain of MTP modules (each reads one token further
        than the one before; `impl.sched.admission_rules.reserve_prefill_lookahead`), else 0."""
        if not self.use_eagle:
            return 0
        if self.spec_method == "mtp" and min(self.num_mtp_modules, self.num_spec_tokens) > 1:
            return self.num_spec_tokens
        return 1

    @property
    def num_reprefillable_tokens(self) -> int:
        """Computed tokens a chain of MTP modules may prefill again (all but one of its
        look-ahead): not indexed yet, and left to the decode side by a P/D prefill."""
        return max(0, self.num_prefill_lookahead - 1)

    @property
    def num_hash_lookahead_tokens(self) -> int:
        """Tokens after each block its hash also covers: the drafter's prefill look-ahead for an
        EAGLE-family drafter from 0.33 with prefix caching and no connector
        (`Behaviour.eagle_lookahead_block_hashes`), else 0."""
        if (self.use_eagle and self.behaviour.eagle_lookahead_block_hashes
                and self.enable_prefix_caching and self.kv_connector is None):
            return self.num_prefill_lookahead
        return 0

    @property
    def use_eagle_block_drop(self) -> bool:
        """EAGLE hits give up their last block, unless the hashes cover the next token."""
        return self.use_eagle and self.num_hash_lookahead_tokens == 0

    @property
    def scheduler_block_size(self) -> int:
        """Tokens per block as the scheduler counts them: the block size times the DCP size."""
        return self.block_size * self.decode_context_parallel_size

    @property
    def effective_hash_block_size(self) -> int:
        return self.scheduler_block_size if self.hash_block_size is None else self.hash_block_size


def check_mamba_caching(config: SchedulerConfig, kv_cache_config: KVCacheConfig) -> None:
    """Mamba cache modes the twin runs, refused otherwise with one line naming the fix.

    'align' (states cached only at block-aligned chunk ends, `impl.sched.mamba_split`), with
    the drafts' state blocks under speculative decoding (`impl.core.mamba_align`), beside an
    EAGLE drafter too (`impl.sched.mamba_split`). Hashes finer than the block give
    sub-block hits with copy-on-write states (`impl.core.partial_hits`), modelled without a
    KV connector, beside the CPU tier (its pool hits on hash boundaries too, eager mode),
    beside the OffloadingConnector (its partial tails: `impl.connector.offloading.partial_tails`)
    and beside the NIXL connector (a decode side's per-group hit, `impl.core.lagging_hits`).
    From 0.33 upstream refuses mamba prefix caching in any other mode, so under that
    behaviour the twin refuses the same configs."""
    for index, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if not isinstance(spec, MambaSpec):
            continue
        where = f"kv_cache_groups[{index}].mamba_cache_mode"
        if spec.mamba_cache_mode == "align":
            continue
        if config.enable_prefix_caching and config.behaviour.mamba_prefix_caching_requires_align:
            raise ValueError(f"{where}: vLLM {config.behaviour.release} caches mamba prefixes "
                             "only in 'align' mode; set mamba_cache_mode 'align' or disable "
                             "prefix caching")


def check_eagle(config: SchedulerConfig, kv_cache_config: KVCacheConfig) -> None:
    """EAGLE drafting as far as the twin runs it, refused otherwise with one line: not with
    chunked local attention (upstream refuses it at the first lookup). With a KV connector the
    block drop applies to its hits too (`use_eagle_block_drop`, which a connector keeps on in
    0.33)."""
    if not config.use_eagle:
        return
    for index, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if isinstance(spec, ChunkedLocalAttentionSpec):
            raise ValueError(f"kv_cache_groups[{index}]: {type(spec).__name__} with an EAGLE "
                             "drafter is not implemented by the twin (spec_method 'ngram')")
