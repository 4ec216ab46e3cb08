"""Stage 1: the block size each layer gets, and the per-layer specs that follow from it.

Three rules, in the order upstream applies them while it builds the engine:

1. Mamba cache mode. With prefix caching a mamba layer caches its state at block boundaries
   ("align"), so its block is the attention block; without, one state per request ("none"),
   and its block spans the whole `max_model_len`.
2. Mamba hybrids grow the attention block until one attention page holds a mamba state (seed
   case 4), in steps of the backend's kernel block: with k = max(kernel block, block size),
   the block becomes k * ceil(state / (k * bytes per token)), rounded up to a kernel-block
   multiple. Every mamba page is then padded to exactly that attention page. Upstream takes the
   bytes per token from the model config, which describes one attention shape: here, the first
   attention layer's.
3. Sliding-window layers take the largest kernel-block multiple that fits in the block size
   (at least one kernel block), so their page is never larger than a full layer's unless the
   block size is smaller than one kernel block.

Chunked-local and full layers take the block size as it stands after rule 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from impl.plan.kv_specs import AttentionKV, LayerKV, MambaKV, cdiv
from impl.plan.layers import LayerSpec, ModelSpec
from impl.plan.options import PlanOptions


@dataclass(frozen=True, slots=True)
class BlockSizes:
    """The outcome of stage 1, with what the explanation needs."""

    block_size: int  # attention block size after mamba alignment
    mamba_block_size: int | None
    mamba_cache_mode: str | None
    mamba_page_size_padded: int | None
    mamba_state_bytes: int  # the largest state (0 without mamba layers)


def resolve_block_sizes(model: ModelSpec, options: PlanOptions) -> BlockSizes:
    block_size = options.requested_block_size
    mambas = model.mamba_layers
    if not mambas:
        return BlockSizes(block_size, None, None, None, 0)
    # Rule 1.
    mode = "align" if options.enable_prefix_caching else "none"
    mamba_block = block_size if mode == "align" else options.max_model_len
    state = max(layer.state_bytes for layer in mambas)
    attention = model.attention_layers
    if not attention:  # a pure mamba model has no attention page to match
        return BlockSizes(block_size, mamba_block, mode, None, state)
    # Rule 2.
    kernel = options.kernel_block_size
    per_token = attention[0].bytes_per_token
    step = max(kernel, block_size)
    needed = step * cdiv(state, step * per_token)
    needed = kernel * cdiv(needed, kernel)
    block_size = max(block_size, needed)
    if mode == "align":
        mamba_block = block_size
    page = block_size * per_token
    padded = page if page != state else None
    return BlockSizes(block_size, mamba_block, mode, padded, state)


def window_block_size(block_size: int, kernel_block_size: int) -> int:
    """Rule 3: the largest multiple of the kernel block within `block_size`, at least one."""
    return max(kernel_block_size, block_size // kernel_block_size * kernel_block_size)


def layer_spec(layer: LayerSpec, sizes: BlockSizes, options: PlanOptions) -> LayerKV:
    if layer.kind == "mamba":
        assert sizes.mamba_block_size is not None and sizes.mamba_cache_mode is not None
        return MambaKV(shapes=layer.state_shapes, dtypes=layer.state_dtypes,
                       block_size=sizes.mamba_block_size,
                       page_size_padded=sizes.mamba_page_size_padded,
                       mamba_cache_mode=sizes.mamba_cache_mode)
    block_size = sizes.block_size
    if layer.kind == "sliding_window":
        block_size = window_block_size(block_size, options.kernel_block_size)
    return AttentionKV(kind=layer.kind, block_size=block_size, num_kv_heads=layer.num_kv_heads,
                       head_size=layer.head_size, dtype=layer.dtype,
                       sliding_window=layer.sliding_window,
                       attention_chunk_size=layer.attention_chunk_size)


def layer_specs(model: ModelSpec, options: PlanOptions) -> tuple[BlockSizes, dict[str, LayerKV]]:
    """Every layer's spec, in model order (the order upstream registers them)."""
    sizes = resolve_block_sizes(model, options)
    return sizes, {layer.name: layer_spec(layer, sizes, options) for layer in model.layers}
