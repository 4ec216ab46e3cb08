"""The plan in words: one line per group saying why it holds these layers and why its page has
this size, then the pool. `vtwin kv plan` prints this; the JSON form is `impl.plan.render`.
"""

from __future__ import annotations

from collections import Counter

from impl.plan.grouping import PlannedGroup, group_size
from impl.plan.kv_specs import AttentionKV, LayerKV
from impl.plan.planner import KVCachePlan
from impl.plan.units import size


def kind_label(spec: LayerKV) -> str:
    if isinstance(spec, AttentionKV):
        if spec.kind == "sliding_window":
            return f"sliding_window({spec.sliding_window})"
        if spec.kind == "chunked_local":
            return f"chunked_local({spec.attention_chunk_size})"
        if spec.kind == "cross_attention":
            return "cross_attention"
        local = spec.sliding_window or spec.attention_chunk_size
        return "full" if local is None else f"full (promoted local {local})"
    return "mamba"


def _short_names(names: tuple[str, ...], limit: int = 6) -> str:
    indices = [name.split(".")[2] if name.startswith("model.layers.") else name for name in names]
    shown = ", ".join(indices[:limit])
    return f"layers {shown}{', ...' if len(indices) > limit else ''}"


def why_layers(plan: KVCachePlan, index: int) -> str:
    group = plan.groups[index]
    total = len(plan.model.layers)
    if len(plan.groups) == 1:
        if group.uniform_type:
            return (f"all {total} layers: one type, but their specs differ, so each keeps its "
                    "own page and a block holds all of them")
        return f"all {total} layers: every layer has the same spec"
    label = kind_label(group.spec)
    if group.uniform_type:  # only block-outer packing makes several such groups
        return (f"{label} layers bucketed by type: a block-outer layout packs pages of "
                "different sizes side by side, so no page is grown or padded")
    siblings = [g for g in plan.groups if g.spec == group.spec]
    counts = Counter(kind_label(g.spec) for g in plan.groups for _ in g.layer_names)
    per_group = group_size(list(Counter(
        g.spec for g in plan.groups for _ in g.layer_names).values()))
    smallest = min(counts.values())
    rule = (f"the smallest type has {smallest}" if per_group == smallest else
            f"no type has 1.5x the smallest's {smallest} layers, so the largest count")
    dealt = (f"{counts[label]} {label} layers dealt round-robin into {len(siblings)} groups"
             if len(siblings) > 1 else f"all {counts[label]} {label} layers")
    return f"{dealt}; groups hold up to {per_group} layers ({rule})"


def why_page(plan: KVCachePlan, group: PlannedGroup) -> str:
    spec = group.spec
    before = plan.layer_specs[group.layer_names[0]]
    notes: list[str] = []
    if isinstance(spec, AttentionKV):
        page = f"{spec.block_size} tokens x {size(spec.bytes_per_token)} per token"
        sizes = plan.sizes
        if sizes.mamba_state_bytes and sizes.block_size != plan.options.requested_block_size:
            notes.append(f"block grown from {plan.options.requested_block_size} to "
                         f"{sizes.block_size} tokens so a page holds the "
                         f"{size(sizes.mamba_state_bytes)} mamba state")
        if spec.kind == "sliding_window" and before.block_size != sizes.block_size:
            notes.append(f"a window layer takes {before.block_size}-token blocks (a multiple "
                         f"of the {plan.options.kernel_block_size}-token kernel block)")
        if before.block_size != spec.block_size:
            notes.append(f"block scaled from {before.block_size} to {spec.block_size} tokens "
                         "to match the largest page")
    else:
        page = f"one {size(spec.content_bytes)} state"
    if spec.page_size_padded is not None:
        notes.append(f"padded from {size(spec.unpadded_page_size_bytes)} to "
                     f"{size(spec.page_size_padded)} to match the other pages")
    text = f"page {size(spec.page_size_bytes)} = {page}"
    if group.uniform_type:
        pages = Counter(size(s.page_size_bytes) for s in group.layer_specs)
        text = (f"{size(group.page_size_bytes)} a block = "
                + " + ".join(f"{count} x {page}" for page, count in pages.items())
                + " (each layer keeps its own page)")
    return text + (f" ({'; '.join(notes)})" if notes else "")


def explain(plan: KVCachePlan) -> list[str]:
    lines = [f"{plan.model.name}: {len(plan.model.layers)} layers -> {len(plan.groups)} "
             f"KV-cache group{'s' if len(plan.groups) != 1 else ''}"]
    blocks = plan.request_blocks()
    for index, group in enumerate(plan.groups):
        spec = group.spec
        count = len(group.layer_names)
        lines.append(f"  group {index}: {kind_label(spec)}, {count} layer"
                     f"{'s' if count != 1 else ''} ({_short_names(group.layer_names)}), block "
                     f"{spec.block_size}: {why_layers(plan, index)}; {why_page(plan, group)}; "
                     f"{blocks[index]} blocks per max-length request")
    lines.append(f"  pool: {plan.num_blocks} blocks x {size(plan.bytes_per_block)} = "
                 f"{size(plan.pool_bytes)} of {size(plan.memory)} "
                 f"(layout {plan.options.kv_cache_layout}, {len(plan.tensors)} "
                 f"tensor{'s' if len(plan.tensors) != 1 else ''}); one "
                 f"request of {plan.options.max_model_len} tokens holds {sum(blocks)} blocks")
    return lines
