"""The plan as plain data: the JSON `vtwin kv plan --json` prints and the form the differential
tests compare (the upstream adapter turns upstream's KVCacheConfig into exactly this shape).

Only what upstream's plan also states is here: groups with their layers and specs, the number
of blocks and the tensors. How the twin got there (explanations) is `impl.plan.explain`.
"""

from __future__ import annotations

from typing import Any

from impl.plan.grouping import PlannedGroup
from impl.plan.kv_specs import AttentionKV, LayerKV
from impl.plan.planner import KVCachePlan
from impl.plan.sizing import PlannedTensor


def spec_to_dict(spec: LayerKV) -> dict[str, Any]:
    if isinstance(spec, AttentionKV):
        return {"type": spec.kind, "block_size": spec.block_size,
                "num_kv_heads": spec.num_kv_heads, "head_size": spec.head_size,
                "dtype": spec.dtype, "sliding_window": spec.sliding_window,
                "attention_chunk_size": spec.attention_chunk_size,
                "page_size_bytes": spec.page_size_bytes,
                "page_size_padded": spec.page_size_padded}
    return {"type": "mamba", "block_size": spec.block_size,
            "shapes": [list(shape) for shape in spec.shapes], "dtypes": list(spec.dtypes),
            "mamba_cache_mode": spec.mamba_cache_mode, "page_size_bytes": spec.page_size_bytes,
            "page_size_padded": spec.page_size_padded}


def group_to_dict(group: PlannedGroup) -> dict[str, Any]:
    if group.uniform_type:
        spec: dict[str, Any] = {
            "type": "uniform_type", "block_size": group.spec.block_size,
            "page_size_bytes": group.page_size_bytes,
            "layers": {name: spec_to_dict(s)
                       for name, s in zip(group.layer_names, group.layer_specs, strict=True)}}
    else:
        spec = spec_to_dict(group.spec)
    return {"layers": list(group.layer_names), "spec": spec}


def tensor_to_dict(tensor: PlannedTensor) -> dict[str, Any]:
    return {"size": tensor.size, "layers": list(tensor.layers),
            "layer_stride": tensor.layer_stride, "block_stride": tensor.block_stride,
            "offset": tensor.offset}


def plan_to_dict(plan: KVCachePlan) -> dict[str, Any]:
    """The comparison form: equal dicts mean equal plans."""
    return {"num_blocks": plan.num_blocks,
            "groups": [group_to_dict(group) for group in plan.groups],
            "tensors": [tensor_to_dict(tensor) for tensor in plan.tensors]}
