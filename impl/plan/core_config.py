"""From planned groups to the specs the KV-cache manager and the model runner use
(`impl.core.specs`), for the engine twin and for workloads that name a model.

The core specs know block sizes, heads, head sizes, windows, chunks and mamba state sizes, and
nothing of padding or of layers that differ within a group: a plan that needs those (padded
window pages, one-type groups of different heads, a local layer promoted to full allocation,
8-bit caches) is refused with a line saying which group and why, rather than run wrongly.
"""

from __future__ import annotations

from collections.abc import Sequence

from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from impl.plan.errors import PlanError
from impl.plan.grouping import PlannedGroup
from impl.plan.kv_specs import AttentionKV

CORE_DTYPES = ("float32", "float16", "bfloat16")


def core_spec(group: PlannedGroup, index: int) -> KVCacheSpec:
    spec = group.spec
    where = f"kv_cache_groups[{index}]"
    if group.uniform_type:
        raise PlanError(where, "layers of one type with different specs share this group; the "
                        "core specs hold one spec per group")
    if not isinstance(spec, AttentionKV):
        return MambaSpec(block_size=spec.block_size, state_bytes=spec.page_size_bytes,
                         mamba_cache_mode=spec.mamba_cache_mode)
    if spec.page_size_padded is not None:
        raise PlanError(where, f"pages padded to {spec.page_size_padded} bytes; the core specs "
                        "have no padding")
    if spec.dtype not in CORE_DTYPES:
        raise PlanError(where, f"cache dtype {spec.dtype} (the core specs know "
                        f"{', '.join(CORE_DTYPES)})")
    block, heads, size, dtype = spec.block_size, spec.num_kv_heads, spec.head_size, spec.dtype
    if spec.kind == "sliding_window":
        return SlidingWindowSpec(block, heads, size, dtype,
                                 sliding_window=spec.sliding_window or 0)
    if spec.kind == "chunked_local":
        return ChunkedLocalAttentionSpec(block, heads, size, dtype,
                                         attention_chunk_size=spec.attention_chunk_size or 0)
    if spec.sliding_window or spec.attention_chunk_size:
        raise PlanError(where, "a local layer promoted to full allocation (the hybrid manager "
                        "is off); the core specs would attend fully")
    return FullAttentionSpec(block, heads, size, dtype)


def core_groups(groups: Sequence[PlannedGroup]) -> tuple[KVCacheGroupSpec, ...]:
    return tuple(KVCacheGroupSpec(group.layer_names, core_spec(group, index))
                 for index, group in enumerate(groups))
