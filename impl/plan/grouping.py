"""Stage 2: from per-layer specs to KV-cache groups (seed 001, "Allocation").

A group is a set of layers that share one block table, so they must need the same number of
blocks for any request (same attention type), and every group must have the same page size
(one pool). In order:

- identical specs everywhere: one group of all layers;
- one type, pages of different sizes (say, full attention with different head counts): still
  one group, each layer with its own page, the block as big as their sum;
- otherwise unify the page sizes: smaller attention pages grow by more tokens per block when
  the largest page is a multiple of theirs, else they are padded; mamba pages are padded;
- then split each type's layers into groups of equal size: the smallest type's layer count,
  or the largest when no type has 1.5 times another's (gpt-oss + one drafter layer), with the
  last group of a type padded by empty slots. Layers are dealt round-robin (layer i of a type
  goes to group i mod n), so pipeline stages stay balanced.

With the hybrid manager off, local layers are first promoted to full allocation (they still
attend locally), which must leave a single type. Block-outer layouts pack pages of different
sizes instead of unifying them (`impl.plan.packing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from impl.plan.errors import PlanError
from impl.plan.kv_specs import AttentionKV, LayerKV, cdiv


@dataclass(frozen=True, slots=True)
class PlannedGroup:
    """Layers sharing one block table. `spec` is the group's spec; `layer_specs` has one spec per
    layer (all equal to `spec` unless `uniform_type`: one type, layers that differ otherwise,
    such as head counts, each keeping its own page, a block holding all of them)."""

    layer_names: tuple[str, ...]
    spec: LayerKV
    layer_specs: tuple[LayerKV, ...]
    uniform_type: bool = False

    @property
    def page_size_bytes(self) -> int:
        """One block of the group as the block pool counts it."""
        if self.uniform_type:
            return sum(spec.page_size_bytes for spec in self.layer_specs)
        return self.spec.page_size_bytes


def _windows(specs: Sequence[LayerKV]) -> tuple[set[int], set[int]]:
    windows = {s.sliding_window for s in specs if isinstance(s, AttentionKV)}
    chunks = {s.attention_chunk_size for s in specs if isinstance(s, AttentionKV)}
    return {w for w in windows if w is not None}, {c for c in chunks if c is not None}


def merged_spec(specs: Sequence[LayerKV]) -> LayerKV | None:
    """The one spec all layers can share, else None. Identical specs merge; so do full layers
    differing only in the window or chunk they remember (promoted local layers), unless they
    remember two window sizes (refused, as upstream does) or a window and a chunk."""
    first = specs[0]
    if all(spec == first for spec in specs):
        return first
    if not all(isinstance(s, AttentionKV) and s.kind == "full" for s in specs):
        return None
    windows, chunks = _windows(specs)
    for name, sizes in (("sliding window", windows), ("attention chunk", chunks)):
        if len(sizes) > 1:
            raise PlanError("layers", "all attention layers in one KV-cache group must have "
                            f"the same {name} size (got {sorted(sizes)})")
    if not all(first.same_cache(spec) for spec in specs) or (windows and chunks):
        return None
    assert isinstance(first, AttentionKV)
    return replace(first, sliding_window=next(iter(windows), None),
                   attention_chunk_size=next(iter(chunks), None))


def uniform_type(specs: Sequence[LayerKV]) -> bool:
    first = specs[0]
    return (len({spec.block_size for spec in specs}) == 1
            and all(spec.type_key == first.type_key for spec in specs))


def promote_local_layers(specs: dict[str, LayerKV]) -> dict[str, LayerKV]:
    """Hybrid manager off: windows and chunks beside full layers are allocated as full (taking
    the full layers' block size when they agree on one). Must end with one type."""
    values = list(specs.values())
    if merged_spec(values) is not None or uniform_type(values):
        return specs
    kinds = {spec.kind for spec in values}
    full_blocks = {s.block_size for s in values if isinstance(s, AttentionKV) and s.kind == "full"}
    promoted = dict(specs)
    if "full" in kinds and kinds & {"sliding_window", "chunked_local"}:
        for name, spec in specs.items():
            if isinstance(spec, AttentionKV) and spec.kind in ("sliding_window", "chunked_local"):
                block = next(iter(full_blocks)) if len(full_blocks) == 1 else spec.block_size
                padded = spec.page_size_padded
                if padded is not None:
                    padded = max(padded, spec.unpadded_page_size_bytes * block // spec.block_size)
                promoted[name] = replace(spec, kind="full", block_size=block,
                                         page_size_padded=padded)
    after = list(promoted.values())
    if merged_spec(after) is None and not uniform_type(after):
        raise PlanError("disable_hybrid_kv_cache_manager", "failed to promote local KV cache "
                        f"specs to one unified type (layer types: {', '.join(sorted(kinds))})")
    return promoted


def unify_page_sizes(specs: dict[str, LayerKV]) -> dict[str, LayerKV]:
    """Every page as large as the largest: more tokens per block where that divides evenly,
    padding otherwise (always for mamba, whose page does not scale with tokens)."""
    largest = max(spec.page_size_bytes for spec in specs.values())
    out: dict[str, LayerKV] = {}
    for name, spec in specs.items():
        page = spec.page_size_bytes
        if page == largest:
            out[name] = spec
        elif isinstance(spec, AttentionKV) and largest % page == 0:
            out[name] = spec.scaled(largest // page)
        else:
            out[name] = spec.padded(largest)
    return out


def group_size(counts: Sequence[int]) -> int:
    """Layers per group: the smallest type's count, unless the largest is under 1.5 times it
    (then the largest, padding the rest: fewer empty slots than splitting the large one)."""
    smallest, largest = min(counts), max(counts)
    return largest if largest < smallest * 1.5 else smallest


def group_by_ratio(specs: dict[str, LayerKV]) -> list[PlannedGroup]:
    buckets: list[tuple[LayerKV, list[str]]] = []
    for name, spec in specs.items():
        for first, names in buckets:
            if first == spec:
                names.append(name)
                break
        else:
            buckets.append((spec, [name]))
    size = group_size([len(names) for _, names in buckets])
    groups: list[PlannedGroup] = []
    for spec, names in buckets:
        count = cdiv(len(names), size)
        groups.extend(PlannedGroup(tuple(names[i::count]), spec, (spec,) * len(names[i::count]))
                      for i in range(count))
    return groups


def single_group(specs: dict[str, LayerKV]) -> list[PlannedGroup] | None:
    """One group when every layer shares a spec, or at least a type; else None."""
    names, values = tuple(specs), tuple(specs.values())
    merged = merged_spec(values)
    if merged is not None:
        return [PlannedGroup(names, merged, values)]
    if uniform_type(values):
        return [PlannedGroup(names, values[0], values, uniform_type=True)]
    return None
