"""Build upstream vLLM's configuration objects from a workload's `EngineConfig`.

The scheduler needs a full `VllmConfig` even though no model ever runs: a model config (a tiny
Llama `config.json` written to a temporary directory, tokenizer skipped), scheduler, cache and,
for speculative decoding, an n-gram speculative config (no draft model, no lookahead slots).
Everything else is left at upstream 0.32.0's defaults, because those defaults are what the twin
promises to reproduce. Each field goes only to a release whose class has it
(`capabilities.honour`): a release without one gets the workload refused if it sets the field.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from conformance.kv.family import group_shape
from conformance.kv.upstream import upstream_spec
from conformance.systems.connector import upstream_transfer_config
from conformance.systems.upstream.capabilities import honour
from workloads.model import EngineConfig

TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_tiny_model(directory: Path, max_model_len: int, dcp: int = 1) -> Path:
    """A model directory holding only a config.json that upstream's ModelConfig accepts.
    Under DCP (`dcp` > 1, as many TP ranks) the heads divide among the ranks and there is one
    KV head (MLA-like), fewer than the ranks, as DCP over grouped queries requires."""
    config = dict(TINY_LLAMA, max_position_embeddings=max(max_model_len, 2048))
    if dcp > 1:
        config.update(num_attention_heads=4 * dcp, hidden_size=64 * dcp, num_key_value_heads=1)
    (directory / "config.json").write_text(json.dumps(config, sort_keys=True))
    return directory


def build_vllm_config(config: EngineConfig, connector_class: tuple[str, str] | None = None
                      ) -> Any:
    """The `VllmConfig` upstream's Scheduler reads. The model directory only has to exist while
    the configs are built (they read config.json once); it is deleted on return."""
    from vllm import __version__ as release
    from vllm.config import (
        CacheConfig,
        LoRAConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    if config.policy == "continuum":
        from vtwin.errors import UserError

        raise UserError("policy 'continuum': upstream vLLM has no such policy; compare the "
                        "twin with the fork (--against continuum-fork) or set policy fcfs")
    scheduler_config = SchedulerConfig(**honour(SchedulerConfig, dict(
        max_model_len=config.max_model_len,
        is_encoder_decoder=False,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=config.long_prefill_token_threshold_adaptive,
        enable_chunked_prefill=config.enable_chunked_prefill,
        policy=config.policy,
        async_scheduling=config.async_scheduling,
        prefill_schedule_interval=config.prefill_schedule_interval,
        disable_chunked_mm_input=(config.multimodal is not None
                                  and config.multimodal.disable_chunked_mm_input),
    ), config, release))
    cache_config = CacheConfig(**honour(CacheConfig, dict(
        block_size=config.block_size,
        enable_prefix_caching=config.enable_prefix_caching,
        prefix_caching_hash_algo=config.hash_algo,
        mamba_cache_mode=mamba_cache_mode(config),
        enable_mamba_shared_prefix_checkpoint=config.enable_mamba_shared_prefix_checkpoint,
    ), config, release))
    cache_config.num_gpu_blocks = config.num_blocks
    if hasattr(cache_config, "prefix_cache_retention_interval"):
        # The engine-wide setting, which the OffloadingConnector reads for its stores, must
        # say what `build_kv_cache_config` hands the KV cache (upstream's default there is 0,
        # replay tails only; a workload's default is None, every reachable block).
        cache_config.prefix_cache_retention_interval = config.prefix_cache_retention_interval
    if (hasattr(cache_config, "prefix_match_unit") and config.hash_block_size is not None
            and len(config.kv_cache_groups) > 1):
        # The workload's hash block is the engine's `--prefix-match-unit`: connectors read
        # it there (the OffloadingConnector keys its chunks by it), the KV cache config
        # above carries it to the scheduler.
        cache_config.prefix_match_unit = config.hash_block_size
    speculative_config = None
    if config.num_spec_tokens > 0:
        speculative_config = SpeculativeConfig(
            method="ngram_gpu" if config.async_scheduling else "ngram",
            num_speculative_tokens=config.num_spec_tokens,
            prompt_lookup_max=3, prompt_lookup_min=1,
        )
    with tempfile.TemporaryDirectory(prefix="vtwin-model-") as tmp:
        model_config = ModelConfig(
            model=str(write_tiny_model(Path(tmp), config.max_model_len,
                                       config.decode_context_parallel_size)),
            skip_tokenizer_init=True, max_model_len=config.max_model_len, dtype="float32",
            runner=config.runner,
        )
        vllm_config = VllmConfig(
            model_config=model_config, scheduler_config=scheduler_config,
            cache_config=cache_config, speculative_config=speculative_config,
            **context_parallel(config, ParallelConfig),
            lora_config=(LoRAConfig(max_loras=config.max_loras, max_lora_rank=8)
                         if config.max_loras else None),
            kv_transfer_config=upstream_transfer_config(config, connector_class),
            **observability(config), **connector_events(config),
        )
    if config.spec_method != "ngram" and vllm_config.speculative_config is not None:
        # An EAGLE head (or MTP modules) needs a draft model to build; the scheduler only asks
        # the config whether the method is EAGLE's family (hit drops, prefill look-ahead) and,
        # for MTP, how many modules the draft model has (`use_multi_module_mtp`), so the
        # n-gram config built above is relabelled. Drafts come from the harness either way.
        vllm_config.speculative_config.method = config.spec_method
        if config.spec_method == "mtp":
            vllm_config.speculative_config.draft_model_config = SimpleNamespace(
                hf_config=SimpleNamespace(num_nextn_predict_layers=config.mtp_modules))
    # vLLM's CPU platform switches async scheduling off ("not required on CPU"). The scheduler
    # under test is the one a GPU deployment runs, so restore the workload's setting before the
    # Scheduler reads it (it sizes in-flight reservations for recycling KV groups from it).
    vllm_config.scheduler_config.async_scheduling = config.async_scheduling
    return vllm_config


def context_parallel(config: EngineConfig, parallel_config_cls: Any) -> dict[str, Any]:
    """The parallel config for DCP (none when it is off: upstream's default). The scheduler
    reads only the DCP size; tensor parallelism is set to it, which makes it valid (DCP reuses
    the TP ranks, more of them than the tiny model's one KV head)."""
    dcp = config.decode_context_parallel_size
    if dcp == 1:
        return {}
    return {"parallel_config": parallel_config_cls(tensor_parallel_size=dcp,
                                                   decode_context_parallel_size=dcp)}


def observability(config: EngineConfig) -> dict[str, Any]:
    """The observability options the workload turns on (none by default: upstream's
    defaults, so a plain workload builds exactly the config it always did)."""
    options: dict[str, Any] = {}
    if config.log_iteration_details:
        options["enable_logging_iteration_details"] = True
    if config.per_request_spec_decode_metrics != "none":
        options["per_request_spec_decode_metrics"] = config.per_request_spec_decode_metrics
    if not options:
        return {}
    from vllm.config import ObservabilityConfig

    return {"observability_config": ObservabilityConfig(**options)}


def connector_events(config: EngineConfig) -> dict[str, Any]:
    """KV events on for the connector's own tier: the OffloadingConnector's (alone or in a
    MultiConnector) and the SimpleCPUOffloadConnector's. The GPU pool's events are turned on
    by the adapter either way (and the adapter stands in for the publisher the engine would
    build)."""
    connector = config.kv_connector
    if connector is None or (connector.part("offloading") is None
                             and connector.type != "simple_cpu_offload"):
        return {}
    from vllm.config import KVEventsConfig

    return {"kv_events_config": KVEventsConfig(enable_kv_cache_events=True, publisher="null")}


def mamba_cache_mode(config: EngineConfig) -> str:
    """The engine-wide mamba cache mode: upstream keeps one in its cache config and copies it
    into every MambaSpec (`group_shape` does the same per group; the workload checks make the
    mamba groups agree)."""
    modes = [g.mamba_cache_mode for g in config.kv_cache_groups if g.type == "mamba"]
    return (modes[0] if modes else None) or "none"


def build_kv_cache_config(config: EngineConfig) -> Any:
    """One KV-cache group per workload group, one layer each, `num_blocks` blocks in all."""
    from vllm import __version__ as release
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec

    groups = [KVCacheGroupSpec([f"layer{i}"], upstream_spec(group_shape(config, g)))
              for i, g in enumerate(config.kv_cache_groups)]
    return KVCacheConfig(**honour(KVCacheConfig, dict(
        num_blocks=config.num_blocks, kv_cache_tensors=[], kv_cache_groups=groups,
        hash_block_size=config.effective_hash_block_size,
        prefix_cache_retention_interval=config.prefix_cache_retention_interval),
        config, release))
