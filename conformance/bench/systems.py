"""Build the twin's and upstream's objects from one description, so both do identical work.

Upstream is imported inside the functions that need it: the twin's side of every builder runs
without vLLM installed. NONE_HASH is pinned to the same seeded value on both sides (upstream's
default for the XXH3 functions is a random per-process seed), so equal inputs give equal hashes.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

NONE_HASH_SEED = "0"
HASH_ALGOS: tuple[str, ...] = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")

Hasher = Callable[[Any], list[bytes]]


def check_system(system: str) -> None:
    if system not in ("impl", "upstream"):
        raise ValueError(f"unknown system {system!r} (known: impl, upstream)")


def none_hash(algo: str) -> bytes:
    """The parent hash of every first block, from the fixed seed (impl's derivation)."""
    from impl.core.hashing import make_none_hash

    return make_none_hash(algo, NONE_HASH_SEED)


def pin_upstream_none_hash(algo: str) -> None:
    """Point upstream's process-wide NONE_HASH at the same value the twin uses."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils

    # What init_none_hash does with PYTHONHASHSEED=NONE_HASH_SEED, minus its warning about
    # random seeds for XXH3 (the seed here is fixed on purpose).
    kv_cache_utils._NONE_HASH_SEED = NONE_HASH_SEED
    value = get_hash_fn_by_name(algo)(NONE_HASH_SEED)
    if value != none_hash(algo):
        raise AssertionError(f"{algo}: upstream and impl derive NONE_HASH differently")
    kv_cache_utils.NONE_HASH = kv_cache_utils.BlockHash(value)


# -- block pool ----------------------------------------------------------------------------
def block_pool(system: str, num_blocks: int, enable_caching: bool = True,
               hash_block_size: int = 16) -> Any:
    check_system(system)
    if system == "impl":
        from impl.core.block_pool import BlockPool

        return BlockPool(num_blocks, enable_caching, enable_kv_cache_events=False)
    from vllm.v1.core.block_pool import BlockPool as UpstreamBlockPool

    return UpstreamBlockPool(num_blocks, enable_caching, hash_block_size)


# -- hashing -------------------------------------------------------------------------------
def request_hasher(system: str, algo: str, block_size: int) -> Hasher:
    """The function each system calls on a request to hash its newly full blocks."""
    check_system(system)
    if system == "impl":
        from impl.core.request_hasher import RequestBlockHasher

        return RequestBlockHasher(block_size, algo, none_hash(algo))
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils

    pin_upstream_none_hash(algo)
    hasher: Hasher = kv_cache_utils.get_request_block_hasher(block_size,
                                                             get_hash_fn_by_name(algo))
    return hasher


def bare_request(system: str, request_id: str, prompt: list[int]) -> Any:
    """A request with no hasher attached: calling a hasher on it hashes the whole prompt."""
    check_system(system)
    if system == "impl":
        from impl.sched.request import Request

        return Request(request_id, prompt)
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request as UpstreamRequest

    return UpstreamRequest(request_id, list(prompt), SamplingParams(max_tokens=1), None)


# -- scheduler -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SchedSpec:
    """The engine settings both schedulers are built with (one full-attention KV group)."""

    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int = 16
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    hash_algo: str = "sha256"

    @classmethod
    def from_engine_config(cls, config: Any) -> SchedSpec:
        """From a workload's `EngineConfig` (single full-attention group, no spec decode)."""
        return cls(config.num_blocks, config.max_num_seqs, config.max_num_batched_tokens,
                   config.max_model_len, config.block_size, config.enable_prefix_caching,
                   config.enable_chunked_prefill, config.long_prefill_token_threshold,
                   config.hash_algo)


DROPIN = "dropin"
"""A third scheduler for engine loops: the twin behind upstream's scheduler interface (the
`scheduler_cls` adapter), fed upstream's requests and runner outputs like upstream's own."""


def check_scheduler(system: str) -> None:
    if system not in ("impl", "upstream", DROPIN):
        raise ValueError(f"unknown scheduler {system!r} (known: impl, upstream, {DROPIN})")


def scheduler(system: str, spec: SchedSpec) -> Any:
    """A fresh scheduler (log_stats on for all, as `vllm serve` runs by default)."""
    check_scheduler(system)
    return _impl_scheduler(spec) if system == "impl" else _upstream_scheduler(
        spec, adapted=system == DROPIN)


def _impl_scheduler(spec: SchedSpec) -> Any:
    from impl.core.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from impl.sched.config import SchedulerConfig
    from impl.sched.scheduler import Scheduler

    config = SchedulerConfig(
        max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens,
        max_model_len=spec.max_model_len,
        long_prefill_token_threshold=spec.long_prefill_token_threshold,
        enable_chunked_prefill=spec.enable_chunked_prefill,
        enable_prefix_caching=spec.enable_prefix_caching, hash_algo=spec.hash_algo,
        block_size=spec.block_size)
    kv_config = KVCacheConfig(spec.num_blocks, (
        KVCacheGroupSpec(("layer0",), FullAttentionSpec(block_size=spec.block_size)),))
    return Scheduler(config, kv_config, none_hash=none_hash(spec.hash_algo), log_stats=True)


TINY_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 32000, "torch_dtype": "float32",
    "bos_token_id": 1, "eos_token_id": 2,
}


@lru_cache(maxsize=16)
def _vllm_config(spec: SchedSpec) -> Any:
    """Upstream's `VllmConfig` for `spec`. The scheduler only reads it, so it is built once per
    spec; the model directory (a lone config.json) only has to exist while it is built."""
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    scheduler_config = SchedulerConfig(
        max_model_len=spec.max_model_len, is_encoder_decoder=False,
        max_num_batched_tokens=spec.max_num_batched_tokens, max_num_seqs=spec.max_num_seqs,
        long_prefill_token_threshold=spec.long_prefill_token_threshold,
        enable_chunked_prefill=spec.enable_chunked_prefill, policy="fcfs")
    cache_config = CacheConfig(block_size=spec.block_size,
                               enable_prefix_caching=spec.enable_prefix_caching,
                               prefix_caching_hash_algo=spec.hash_algo)
    cache_config.num_gpu_blocks = spec.num_blocks
    with tempfile.TemporaryDirectory(prefix="vtwin-bench-model-") as tmp:
        config = dict(TINY_LLAMA, max_position_embeddings=max(spec.max_model_len, 2048))
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        model_config = ModelConfig(model=tmp, skip_tokenizer_init=True,
                                   max_model_len=spec.max_model_len, dtype="float32")
        return VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                          cache_config=cache_config)


def _upstream_scheduler(spec: SchedSpec, adapted: bool = False) -> Any:
    """Upstream's scheduler, or with `adapted` the class upstream's engine would build for
    `scheduler_cls=conformance.runner.scheduler_adapter.ImplSchedulerAdapter`, with the same
    arguments (imported only then: asv loads this package without the rest of conformance)."""
    import importlib

    import torch
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = _vllm_config(spec)
    pin_upstream_none_hash(spec.hash_algo)
    group = KVCacheGroupSpec(["layer0"], FullAttentionSpec(
        block_size=spec.block_size, num_kv_heads=1, head_size=64, dtype=torch.float32))
    kv_config = KVCacheConfig(num_blocks=spec.num_blocks, kv_cache_tensors=[],
                              kv_cache_groups=[group])
    cls: Any = Scheduler
    if adapted:
        cls = importlib.import_module(
            "conformance.runner.scheduler_adapter").ImplSchedulerAdapter
    return cls(vllm_config=vllm_config, kv_cache_config=kv_config,
               structured_output_manager=StructuredOutputManager(vllm_config),
               block_size=spec.block_size, log_stats=True)
