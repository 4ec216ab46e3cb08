"""The engine config's own rules: what one header's `config` must satisfy field against field
(hash block size against block size, lookahead against spec decode, connectors against
layouts, ...), checked once per workload before any request (`workloads.checks` then checks
the records against it). A broken rule is a `WorkloadError` naming the file, the header's line
and the field."""

from __future__ import annotations

from pathlib import Path

from workloads.closed_loop import connector_config, continuum_config
from workloads.context_parallel import check_context_parallel
from workloads.eagle import eagle_lookahead
from workloads.encoder_decoder import check_encoder_decoder_config
from workloads.errors import WorkloadError
from workloads.model import EngineConfig, KVCacheGroup
from workloads.models import plan_engine_groups
from workloads.multimodal import MultimodalConfig
from workloads.schema import EngineConfigModel
from workloads.uncached_groups import check_uncached_groups


def engine_config(model: EngineConfigModel, source: str | Path, line: int,
                  step_ms: float | None = None) -> EngineConfig:
    def fail(field: str, problem: str) -> WorkloadError:
        return WorkloadError(source, line, f"config.{field}", problem)

    if model.model is not None:  # groups and block size from the model's KV-cache plan
        model = plan_engine_groups(model, source, line)
    if model.hash_block_size is not None and model.block_size % model.hash_block_size:
        raise fail("hash_block_size", f"must divide block_size {model.block_size}")
    if model.num_lookahead_tokens and not model.num_spec_tokens:
        raise fail("num_lookahead_tokens", "needs num_spec_tokens > 0 (a drafter to write ahead)")
    if (model.hash_block_size not in (None, model.block_size) and model.enable_prefix_caching
            and len(model.kv_cache_groups) == 1):
        raise fail("hash_block_size", f"must equal block_size {model.block_size} with one "
                   "KV-cache group and prefix caching on (upstream hashes at the block size)")
    retention = model.prefix_cache_retention_interval
    if retention is not None and retention > 0:
        if retention % model.block_size:
            raise fail("prefix_cache_retention_interval", f"must be 0 or a multiple of the "
                       f"block size {model.block_size} (got {retention})")
        if not any(g.type in ("sliding_window", "mamba") for g in model.kv_cache_groups):
            raise fail("prefix_cache_retention_interval", "an interval needs a sliding-window "
                       "or mamba group (it sparsifies only their caches; upstream refuses it "
                       "otherwise); use 0 or null")
    offloading = next((c for c in (model.kv_connector, *getattr(model.kv_connector,
                                                                "connectors", ()))
                       if c is not None and c.type == "offloading"), None)
    if (offloading is not None and retention  # (an interval has such a group, above)
            and any(g.type in ("sliding_window", "mamba") for g in model.kv_cache_groups)):
        chunk = offloading.offloaded_block_size or model.block_size
        if retention % chunk:
            raise fail("prefix_cache_retention_interval", f"must be a multiple of the "
                       f"OffloadingConnector's chunk of {chunk} tokens beside a sliding window "
                       f"or mamba group (upstream's connector refuses it; got {retention})")
    if model.per_request_spec_decode_metrics != "none" and not model.num_spec_tokens:
        raise fail("per_request_spec_decode_metrics", "needs num_spec_tokens > 0 (upstream "
                   "refuses per-request spec-decode metrics without speculative decoding)")
    if model.data_parallel and model.prefill_schedule_interval < 2:
        raise fail("data_parallel", "needs prefill_schedule_interval > 1 (the cadence the "
                   "data-parallel engine core throttles prefill to)")
    if model.runner == "pooling":
        for field, value, why in (
                ("num_spec_tokens", model.num_spec_tokens, "a pooling model samples nothing "
                 "to draft after"),
                ("async_scheduling", model.async_scheduling, "not modelled yet for pooling "
                 "models (upstream turns it off for them by default)"),
                ("multimodal", model.multimodal, "not modelled yet for pooling models"),
                ("kv_connector", model.kv_connector, "not modelled yet for pooling models")):
            if value:
                raise fail(field, f"must be off with runner 'pooling': {why}")
    if model.max_num_batched_tokens < model.max_num_seqs:
        raise fail("max_num_batched_tokens", f"must be >= max_num_seqs {model.max_num_seqs}")
    if not model.enable_chunked_prefill and model.max_num_batched_tokens < model.max_model_len:
        raise fail(
            "max_num_batched_tokens",
            f"must be >= max_model_len {model.max_model_len} when chunked prefill is off",
        )
    check_context_parallel(model, fail)
    scheduler_block = model.block_size * model.decode_context_parallel_size
    needed = -(-model.max_model_len // scheduler_block)
    # A reference window keeps the whole prompt: as full attention, one request can need it all.
    has_full = any(g.type in ("full", "reference_window") for g in model.kv_cache_groups)
    if has_full and model.num_blocks - 1 < needed:
        raise fail(
            "num_blocks",
            f"{model.num_blocks - 1} usable blocks cannot hold one request of max_model_len "
            f"{model.max_model_len} ({needed} blocks of {scheduler_block})",
        )
    if "nixl" in _connector_types(model):
        for index, g in enumerate(model.kv_cache_groups):
            if g.type not in ("full", "reference_window", "sliding_window", "chunked_local",
                              "mamba") or g.bounded_replay:
                raise fail(f"kv_cache_groups[{index}]", f"the 'nixl' connector with a "
                           f"{g.type}{' (bounded replay)' if g.bounded_replay else ''} group is "
                           "not modelled (full attention, windows and chunked local are)")
    check_uncached_groups(model, fail)
    check_encoder_decoder_config(model, fail)
    modes = {g.mamba_cache_mode or "none" for g in model.kv_cache_groups if g.type == "mamba"}
    if len(modes) > 1:
        raise fail("kv_cache_groups", "mamba groups must share one mamba_cache_mode (upstream "
                   f"has one per engine; got {sorted(modes)})")
    groups = tuple(
        KVCacheGroup(g.type, g.sliding_window, g.attention_chunk_size, g.mamba_cache_mode,
                     g.rswa_window, g.bounded_replay)
        for g in model.kv_cache_groups
    )
    return EngineConfig(
        model=model.model,
        block_size=model.block_size,
        num_blocks=model.num_blocks,
        max_num_seqs=model.max_num_seqs,
        max_num_batched_tokens=model.max_num_batched_tokens,
        max_model_len=model.max_model_len,
        long_prefill_token_threshold=model.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=model.long_prefill_token_threshold_adaptive,
        enable_chunked_prefill=model.enable_chunked_prefill,
        policy=model.policy,
        enable_prefix_caching=model.enable_prefix_caching,
        hash_algo=model.hash_algo,
        kv_cache_groups=groups,
        num_spec_tokens=model.num_spec_tokens,
        async_scheduling=model.async_scheduling,
        hash_block_size=model.hash_block_size,
        num_lookahead_tokens=eagle_lookahead(model, fail),
        prefill_schedule_interval=model.prefill_schedule_interval,
        max_loras=model.max_loras,
        prefix_cache_retention_interval=model.prefix_cache_retention_interval,
        enable_mamba_shared_prefix_checkpoint=model.enable_mamba_shared_prefix_checkpoint,
        continuum=continuum_config(model.continuum, model.policy, step_ms, fail),
        kv_connector=connector_config(model.kv_connector, len(groups), model.block_size, fail),
        multimodal=None if model.multimodal is None else MultimodalConfig(
            model.multimodal.max_num_encoder_input_tokens, model.multimodal.encoder_cache_size,
            model.multimodal.disable_chunked_mm_input, model.multimodal.max_tokens_per_item),
        log_stats=model.log_stats,
        runner=model.runner,
        data_parallel=model.data_parallel,
        log_iteration_details=model.log_iteration_details,
        per_request_spec_decode_metrics=model.per_request_spec_decode_metrics,
        spec_method=model.spec_method,
        mtp_modules=model.mtp_modules,
        decode_context_parallel_size=model.decode_context_parallel_size,
    )


def _connector_types(model: EngineConfigModel) -> set[str]:
    """The connector's type and, for a MultiConnector, its connectors' types."""
    connector = model.kv_connector
    if connector is None:
        return set()
    return {connector.type, *(c.type for c in getattr(connector, "connectors", ()))}
