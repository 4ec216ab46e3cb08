"""Upstream vLLM 0.32.0's KV-cache planner, driven with the same model and options as the twin.

Upstream plans in two places, and both run here with upstream's own code:

1. while the engine is built: `MambaModelConfig.verify_and_update_config` (mamba cache mode and
   block size) and `Platform._align_hybrid_block_size` (attention block growth, mamba page
   padding); then each layer makes its spec (`Attention.get_kv_cache_spec`: window layers pick
   their block with `_largest_kernel_block_within`);
2. `get_kv_cache_configs`: groups, page unification, memory check, blocks, tensors.

No model is built, so three things stand in for one, each the smallest that upstream's code
accepts: a Llama `config.json` carrying the first attention layer's heads, head size and dtype
(the model config is where step 1 reads the bytes per token); a model class whose
`get_mamba_specs_from_config` returns the model's mamba states; and an attention backend whose
kernels take any multiple of `kernel_block_size` tokens and keep specs as they are.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

from impl.plan.layers import LayerSpec, ModelSpec
from impl.plan.options import PlanOptions

_NATIVE_DTYPES = ("float32", "float16", "bfloat16")
_FP8_CACHE_DTYPES = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _stub_backend(kernel_block_size: int) -> type:
    from vllm.v1.attention.backend import MultipleOf

    class StubAttentionBackend:
        """Kernels for any multiple of `kernel_block_size` tokens; specs kept as built."""

        @staticmethod
        def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[Any]:
            return [MultipleOf(kernel_block_size)]

        @staticmethod
        def customize_spec(spec: Any) -> Any:
            return spec

        @staticmethod
        def is_ssm() -> bool:
            return False

        @staticmethod
        def get_name() -> str:
            return f"STUB_MULTIPLE_OF_{kernel_block_size}"

    return StubAttentionBackend


def _vllm_config(model: ModelSpec, options: PlanOptions, directory: Path) -> Any:
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    attention = model.attention_layers
    first = attention[0] if attention else LayerSpec("x", "full", 1, 64, model.dtype)
    dtype = first.dtype if first.dtype in _NATIVE_DTYPES else model.dtype
    heads = first.num_kv_heads
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": heads * first.head_size, "intermediate_size": 64,
              "num_hidden_layers": 1, "num_attention_heads": heads,
              "num_key_value_heads": heads, "head_dim": first.head_size, "vocab_size": 256,
              "max_position_embeddings": options.max_model_len, "torch_dtype": dtype}
    (directory / "config.json").write_text(json.dumps(config))
    model_config = ModelConfig(model=str(directory), skip_tokenizer_init=True,
                               max_model_len=options.max_model_len, dtype=dtype)
    scheduler_config = SchedulerConfig(
        max_model_len=options.max_model_len, is_encoder_decoder=False,
        max_num_batched_tokens=options.max_num_batched_tokens,
        max_num_seqs=min(256, options.max_num_batched_tokens), enable_chunked_prefill=True)
    cache_config = CacheConfig(block_size=options.requested_block_size,
                               enable_prefix_caching=options.enable_prefix_caching)
    vllm_config = VllmConfig(model_config=model_config, scheduler_config=scheduler_config,
                             cache_config=cache_config)
    # The CPU platform adjusts some of these while the config is built; the plan under test is
    # the one for the options given, so set them back.
    vllm_config.cache_config.block_size = options.requested_block_size
    vllm_config.cache_config.enable_prefix_caching = options.enable_prefix_caching
    vllm_config.cache_config.cache_dtype = _FP8_CACHE_DTYPES.get(first.dtype, "auto")
    vllm_config.cache_config.kv_cache_layout = options.kv_cache_layout
    vllm_config.cache_config.num_gpu_blocks_override = options.num_gpu_blocks_override
    vllm_config.scheduler_config.async_scheduling = options.async_scheduling
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = (
        options.disable_hybrid_kv_cache_manager)
    return vllm_config


def _mamba_specs(model: ModelSpec, block_size: int) -> list[Any]:
    from vllm.v1.kv_cache_interface import MambaSpec

    return [MambaSpec(shapes=layer.state_shapes,
                      dtypes=tuple(_torch_dtype(d) for d in layer.state_dtypes),
                      block_size=block_size) for layer in model.mamba_layers]


def _engine_build_steps(model: ModelSpec, vllm_config: Any, backend: type) -> None:
    """Step 1: what the engine does to the cache config for a model with mamba layers."""
    from vllm.model_executor import models
    from vllm.model_executor.models.config import MambaModelConfig
    from vllm.platforms.interface import Platform

    if not model.mamba_layers:
        return
    MambaModelConfig.verify_and_update_config(vllm_config)
    if not model.attention_layers:
        return

    class StubModel:
        @staticmethod
        def get_mamba_specs_from_config(config: Any) -> list[Any]:
            return _mamba_specs(model, -1)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(
            models.ModelRegistry, "resolve_model_cls", return_value=(StubModel, "stub")))
        stack.enter_context(mock.patch.object(
            Platform, "_find_non_ssm_backends", return_value=[backend]))
        Platform._align_hybrid_block_size(vllm_config, backend)


def _layer_spec(layer: LayerSpec, vllm_config: Any, backend: type) -> Any:
    """What each layer's `get_kv_cache_spec` returns once the config is final."""
    from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within
    from vllm.v1 import kv_cache_interface as k

    cache = vllm_config.cache_config
    if layer.kind == "mamba":
        return k.MambaSpec(shapes=layer.state_shapes,
                           dtypes=tuple(_torch_dtype(d) for d in layer.state_dtypes),
                           block_size=cache.mamba_block_size,
                           page_size_padded=cache.mamba_page_size_padded,
                           mamba_cache_mode=cache.mamba_cache_mode)
    common = {"num_kv_heads": layer.num_kv_heads, "head_size": layer.head_size,
              "dtype": _torch_dtype(layer.dtype)}
    if layer.kind == "sliding_window":
        probe = k.SlidingWindowSpec(block_size=1, sliding_window=layer.sliding_window, **common)
        per_token = probe.real_page_size_bytes
        block = _largest_kernel_block_within(backend, per_token, per_token * cache.block_size,
                                             cache.block_size, probe)
        return k.SlidingWindowSpec(block_size=block, sliding_window=layer.sliding_window,
                                   **common)
    if layer.kind == "chunked_local":
        return k.ChunkedLocalAttentionSpec(block_size=cache.block_size,
                                           attention_chunk_size=layer.attention_chunk_size,
                                           **common)
    if layer.kind == "cross_attention":
        return k.CrossAttentionSpec(block_size=cache.block_size, **common)
    return k.FullAttentionSpec(block_size=cache.block_size, **common)


def upstream_plan(model: ModelSpec, memory: int, options: PlanOptions) -> dict[str, Any]:
    """Upstream's plan in the twin's comparison form (`impl.plan.render.plan_to_dict`).
    Raises whatever upstream raises for a configuration it refuses."""
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

    backend = _stub_backend(options.kernel_block_size)
    with tempfile.TemporaryDirectory(prefix="vtwin-plan-") as tmp:
        vllm_config = _vllm_config(model, options, Path(tmp))
    _engine_build_steps(model, vllm_config, backend)
    specs = {layer.name: _layer_spec(layer, vllm_config, backend) for layer in model.layers}
    config = get_kv_cache_configs(vllm_config, [specs], [memory])[0]
    return config_to_dict(config)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def spec_to_dict(spec: Any) -> dict[str, Any]:
    from vllm.v1 import kv_cache_interface as k

    if isinstance(spec, k.MambaSpec):
        return {"type": "mamba", "block_size": spec.block_size,
                "shapes": [list(shape) for shape in spec.shapes],
                "dtypes": [_dtype_name(d) for d in spec.dtypes],
                "mamba_cache_mode": spec.mamba_cache_mode,
                "page_size_bytes": spec.page_size_bytes,
                "page_size_padded": spec.page_size_padded}
    kind = ("cross_attention" if isinstance(spec, k.CrossAttentionSpec) else
            "sliding_window" if isinstance(spec, k.SlidingWindowSpec) else
            "chunked_local" if isinstance(spec, k.ChunkedLocalAttentionSpec) else
            "full" if isinstance(spec, k.FullAttentionSpec) else type(spec).__name__)
    return {"type": kind, "block_size": spec.block_size, "num_kv_heads": spec.num_kv_heads,
            "head_size": spec.head_size, "dtype": _dtype_name(spec.dtype),
            "sliding_window": getattr(spec, "sliding_window", None),
            "attention_chunk_size": getattr(spec, "attention_chunk_size", None),
            "page_size_bytes": spec.page_size_bytes, "page_size_padded": spec.page_size_padded}


def config_to_dict(config: Any) -> dict[str, Any]:
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    groups = []
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            as_dict = {"type": "uniform_type", "block_size": spec.block_size,
                       "page_size_bytes": spec.page_size_bytes,
                       "layers": {name: spec_to_dict(s)
                                  for name, s in spec.kv_cache_specs.items()}}
        else:
            as_dict = spec_to_dict(spec)
        groups.append({"layers": list(group.layer_names), "spec": as_dict})
    tensors = [{"size": t.size, "layers": list(t.layers), "layer_stride": t.layer_stride,
                "block_stride": t.block_stride, "offset": t.offset}
               for t in config.kv_cache_tensors]
    return {"num_blocks": config.num_blocks, "groups": groups, "tensors": tensors}
