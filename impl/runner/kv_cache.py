"""KV-cache tensors from a `KVCacheConfig`, laid out as the hybrid KV-cache design describes.

All groups share one block pool and one page size. With n groups of m layers each, there are m
buffers, and buffer j is shared by layer j of every group: a block id names the same page in
every buffer, and since the pool hands each block id to one group at a time, layers that share a
buffer never overlap. A page holds one layer's K and V for `block_size` tokens, so one layer's
view of its buffer is [num_blocks, 2, block_size, num_kv_heads, head_size]; within a page the
memory is head-major ([2, num_kv_heads, block_size, head_size], `attention_metadata.head_major`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from impl.core.specs import AttentionSpec, KVCacheConfig
from impl.plan import LayerSpec, ModelSpec, PlanOptions
from impl.plan.core_config import core_groups
from impl.plan.planner import plan_groups
from impl.plan.sizing import request_blocks
from impl.runner.attention_metadata import head_major
from impl.runner.config import ModelConfig


@dataclass(frozen=True, slots=True)
class KVCaches:
    buffers: tuple[torch.Tensor, ...]  # each [num_blocks * page_size_bytes] int8
    layers: dict[str, torch.Tensor]  # name -> [num_blocks, 2, block_size, kv_heads, head_size]
    layer_group: dict[str, int]  # name -> index of its KV-cache group


def attention_specs(config: KVCacheConfig) -> list[AttentionSpec]:
    """Each group's spec, refusing what a paged attention layer cannot hold."""
    specs: list[AttentionSpec] = []
    for index, group in enumerate(config.kv_cache_groups):
        spec = group.kv_cache_spec
        if not isinstance(spec, AttentionSpec):
            raise ValueError(f"kv_cache_groups[{index}]: {type(spec).__name__} is not supported "
                             "by the model runner (attention groups only)")
        specs.append(spec)
    if not specs:
        raise ValueError("kv_cache_groups: empty (the model runner needs at least one group)")
    page_sizes = {spec.page_size_bytes for spec in specs}
    if len(page_sizes) > 1:
        raise ValueError(f"kv_cache_groups: page sizes differ ({sorted(page_sizes)} bytes); "
                         "one shared pool needs one page size")
    return specs


def allocate_kv_caches(config: KVCacheConfig, device: torch.device) -> KVCaches:
    specs = attention_specs(config)
    page_bytes = specs[0].page_size_bytes
    num_buffers = max(len(group.layer_names) for group in config.kv_cache_groups)
    buffers = tuple(torch.zeros(config.num_blocks * page_bytes, dtype=torch.int8, device=device)
                    for _ in range(num_buffers))
    layers: dict[str, torch.Tensor] = {}
    layer_group: dict[str, int] = {}
    for group_index, (group, spec) in enumerate(zip(config.kv_cache_groups, specs, strict=True)):
        shape = (config.num_blocks, 2, spec.num_kv_heads, spec.block_size, spec.head_size)
        for position, name in enumerate(group.layer_names):
            if name in layers:
                raise ValueError(f"kv_cache_groups[{group_index}]: layer {name!r} is already in "
                                 f"group {layer_group[name]}")
            layers[name] = head_major(
                buffers[position].view(getattr(torch, spec.dtype)).view(shape), spec.block_size)
            layer_group[name] = group_index
    return KVCaches(buffers, layers, layer_group)


def model_layers(model: ModelConfig) -> ModelSpec:
    """The model as the KV-cache planner sees it: full attention everywhere for Llama; Llama 4
    with chunked local layers between its full ones."""
    def layer(index: int) -> LayerSpec:
        chunked = model.is_chunked(index)
        return LayerSpec(model.layer_name(index), "chunked_local" if chunked else "full",
                         model.num_key_value_heads, model.head_dim, model.dtype,
                         attention_chunk_size=model.attention_chunk_size if chunked else None)

    return ModelSpec(model.architecture, tuple(layer(i) for i in range(model.num_hidden_layers)),
                     model.dtype)


def engine_plan_options(block_size: int, max_model_len: int = 2048,
                        max_num_batched_tokens: int = 2048) -> PlanOptions:
    """The torch and Triton kernels take any block size (kernel block 1)."""
    return PlanOptions(block_size=block_size, kernel_block_size=1, max_model_len=max_model_len,
                       max_num_batched_tokens=max_num_batched_tokens)


def model_kv_cache_config(model: ModelConfig, num_blocks: int, block_size: int) -> KVCacheConfig:
    """The planner's groups for the model's layers (one group for Llama) over `num_blocks`."""
    groups = plan_groups(model_layers(model), engine_plan_options(block_size))
    return KVCacheConfig(num_blocks, core_groups(groups))


def blocks_per_request(model: ModelConfig, block_size: int, max_model_len: int,
                       max_num_batched_tokens: int) -> int:
    """Blocks one request of `max_model_len` holds at most, over all its groups."""
    options = engine_plan_options(block_size, max_model_len, max_num_batched_tokens)
    return sum(request_blocks(group, options)
               for group in plan_groups(model_layers(model), options))


def check_model_layers(config: KVCacheConfig, model: ModelConfig) -> None:
    """Every decoder layer must have a cache of the model's shape."""
    names = {name for group in config.kv_cache_groups for name in group.layer_names}
    for spec in attention_specs(config):
        if (spec.num_kv_heads, spec.head_size) != (model.num_key_value_heads, model.head_dim):
            raise ValueError(f"kv cache spec has {spec.num_kv_heads} kv heads of size "
                             f"{spec.head_size}, the model {model.num_key_value_heads} of "
                             f"{model.head_dim}")
    for index in range(model.num_hidden_layers):
        if model.layer_name(index) not in names:
            raise ValueError(f"kv_cache_groups: no group holds layer {model.layer_name(index)!r}")
