"""Hypothesis strategies for the planner's differential test: random layer mixes and options.

A model is a few distinct layer kinds (full, a window, a chunk, a mamba state; heads, head
size and dtype drawn per kind, sometimes per layer so that one type carries pages of different
sizes) laid out in a random order. Options cover every setting the planner reads, including
values upstream refuses: budgets too small for one request, layouts that cannot hold mixed or
padded pages, the hybrid manager switched off beside a mamba layer.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from impl.plan import LayerSpec, ModelSpec, PlanError, PlanOptions
from impl.plan.block_sizes import layer_specs
from impl.plan.layers import attention_layer_name, cross_attention_layer_name, mamba_layer_name
from impl.plan.options import LAYOUTS
from impl.plan.planner import group_layers
from impl.plan.sizing import bytes_per_block, request_bytes

ATTENTION_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn")
STATE_DTYPES = ("bfloat16", "float16", "float32")


@st.composite
def layer_kinds(draw: st.DrawFn) -> dict[str, Any]:
    """One kind of layer, as LayerSpec keyword arguments (no name)."""
    kind = draw(st.sampled_from(("full", "full", "sliding_window", "chunked_local", "mamba",
                                 "cross_attention")))
    if kind == "mamba":
        shapes = draw(st.lists(st.lists(st.integers(1, 4096), min_size=1, max_size=3)
                               .map(tuple), min_size=1, max_size=3))
        dtypes = draw(st.lists(st.sampled_from(STATE_DTYPES), min_size=len(shapes),
                               max_size=len(shapes)))
        return {"kind": kind, "state_shapes": tuple(shapes), "state_dtypes": tuple(dtypes)}
    out: dict[str, Any] = {
        "kind": kind, "num_kv_heads": draw(st.sampled_from((1, 2, 4, 8, 16))),
        "head_size": draw(st.sampled_from((32, 64, 80, 128, 256))),
        "dtype": draw(st.sampled_from(ATTENTION_DTYPES))}
    if kind == "sliding_window":
        out["sliding_window"] = draw(st.sampled_from((1, 7, 64, 128, 1000, 4096)))
    if kind == "chunked_local":
        out["attention_chunk_size"] = draw(st.sampled_from((16, 100, 1024, 8192)))
    return out


@st.composite
def models(draw: st.DrawFn) -> ModelSpec:
    kinds = draw(st.lists(layer_kinds(), min_size=1, max_size=3))
    count = draw(st.integers(1, 40))
    picks = draw(st.lists(st.integers(0, len(kinds) - 1), min_size=count, max_size=count))
    vary_heads = draw(st.booleans()) and draw(st.booleans())
    layers = []
    for index, pick in enumerate(picks):
        kind = dict(kinds[pick])
        if vary_heads and kind["kind"] != "mamba":
            kind["num_kv_heads"] = draw(st.sampled_from((1, 2, 4, 8)))
        name = (mamba_layer_name if kind["kind"] == "mamba" else cross_attention_layer_name
                if kind["kind"] == "cross_attention" else attention_layer_name)(index)
        layers.append(LayerSpec(name=name, **kind))
    return ModelSpec("random", tuple(layers), draw(st.sampled_from(("bfloat16", "float16"))))


@st.composite
def options(draw: st.DrawFn) -> PlanOptions:
    batched = draw(st.sampled_from((256, 2048, 8192)))
    return PlanOptions(
        block_size=draw(st.sampled_from((None, 1, 8, 16, 24, 32, 64, 128, 528))),
        kernel_block_size=draw(st.sampled_from((16, 16, 32, 1))),
        max_model_len=draw(st.sampled_from((64, 500, 2048, 8192, 131072))),
        max_num_batched_tokens=batched,
        async_scheduling=draw(st.booleans()),
        enable_prefix_caching=draw(st.booleans()),
        num_gpu_blocks_override=draw(st.sampled_from((None,) * 5 + (1, 2, 100, 5000))),
        disable_hybrid_kv_cache_manager=draw(st.sampled_from((False, False, False, True))),
        kv_cache_layout=draw(st.sampled_from(tuple(LAYOUTS))),
    )


def _need(model: ModelSpec, options: PlanOptions) -> int:
    """What the twin says one request needs, plus the null block (generation only: the test
    compares both planners on whatever budget comes out); a rough count where it refuses."""
    try:
        _, specs = layer_specs(model, options)
        groups = group_layers(dict(specs), options)
        return request_bytes(groups, options) + bytes_per_block(groups)
    except PlanError:
        return (sum(layer.bytes_per_token for layer in model.attention_layers)
                * options.max_model_len + sum(layer.state_bytes for layer in model.mamba_layers))


@st.composite
def memories(draw: st.DrawFn, model: ModelSpec, options: PlanOptions) -> int:
    """From a quarter of what one request of `max_model_len` needs (refused) to sixteen times
    it, in quarter octaves, and now and then any size at all."""
    if draw(st.sampled_from(range(10))) == 9:
        return draw(st.integers(1, 1 << 40))
    # sampled_from, not integers: Hypothesis favours an integer range's low end, and the low
    # end here is the refusals.
    quarter_octaves = draw(st.sampled_from([*range(17), *range(-1, -9, -1)]))
    return max(1, int(_need(model, options) * 2 ** (quarter_octaves / 4))) + draw(
        st.integers(0, 4095))
