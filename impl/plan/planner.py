"""`plan_kv_cache`: a model's layers and a memory budget in, the KV-cache plan out.

The three stages (see their modules) run in upstream's order, and so do the checks between
them, because which refusal a bad configuration meets first is part of the behaviour:

    block_sizes.layer_specs   each layer's block size and spec (mamba alignment, window blocks)
    group_layers              promotion -> one group? -> packing (block-outer layouts, mixed
                              pages) or page unification + ratio split
    sizing                    override -> memory check -> layout check -> blocks -> tensors
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from impl.plan.block_sizes import BlockSizes, layer_specs
from impl.plan.grouping import (
    PlannedGroup,
    group_by_ratio,
    promote_local_layers,
    single_group,
    unify_page_sizes,
)
from impl.plan.kv_specs import LayerKV
from impl.plan.layers import ModelSpec
from impl.plan.options import PlanOptions
from impl.plan.packing import check_all_placed, pack_groups
from impl.plan.sizing import (
    PlannedTensor,
    bytes_per_block,
    check_layout,
    check_memory,
    request_blocks,
    tensors,
)


@dataclass(frozen=True, slots=True)
class KVCachePlan:
    """`layer_specs` are the specs before page unification (what each layer asked for); the
    groups carry the unified ones."""

    model: ModelSpec
    options: PlanOptions
    memory: int
    sizes: BlockSizes
    layer_specs: dict[str, LayerKV]
    groups: tuple[PlannedGroup, ...]
    num_blocks: int
    bytes_per_block: int
    tensors: tuple[PlannedTensor, ...]

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(group.spec.block_size for group in self.groups)

    @property
    def scheduler_block_size(self) -> int:
        """The token grid every group's blocks fall on: their least common multiple."""
        return math.lcm(*self.block_sizes)

    @property
    def pool_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block

    def request_blocks(self) -> tuple[int, ...]:
        """Per group: blocks one request of `max_model_len` holds at most."""
        return tuple(request_blocks(group, self.options) for group in self.groups)


def group_layers(specs: dict[str, LayerKV], options: PlanOptions) -> list[PlannedGroup]:
    if options.disable_hybrid_kv_cache_manager:
        specs = promote_local_layers(specs)
    groups = single_group(specs)
    if groups is not None:
        return groups
    pages = {spec.page_size_bytes for spec in specs.values()}
    if options.layout.block_outermost and len(pages) > 1:
        return pack_groups(specs)
    return group_by_ratio(unify_page_sizes(specs))


def plan_groups(model: ModelSpec, options: PlanOptions) -> tuple[PlannedGroup, ...]:
    """Stages 1 and 2 only: the groups, for callers that size the pool themselves (the engine
    twin takes a block count; a workload names its own)."""
    return tuple(group_layers(dict(layer_specs(model, options)[1]), options))


def plan_kv_cache(model: ModelSpec, memory: int,
                  options: PlanOptions | None = None) -> KVCachePlan:
    """Raises `PlanError` for a configuration upstream also refuses."""
    options = options or PlanOptions()
    sizes, specs = layer_specs(model, options)
    groups = group_layers(dict(specs), options)
    block_bytes = bytes_per_block(groups)
    if options.num_gpu_blocks_override is not None:
        # The override decides the pool; the checks then plan against what it will hold.
        memory = options.num_gpu_blocks_override * block_bytes
    check_memory(groups, options, memory)
    check_all_placed(groups, specs)
    layout = options.layout
    check_layout(layout, groups)
    count = memory // block_bytes
    return KVCachePlan(
        model=model, options=options, memory=memory, sizes=sizes, layer_specs=specs,
        groups=tuple(groups), num_blocks=count, bytes_per_block=block_bytes,
        tensors=tensors(groups, count, block_bytes, layout),
    )
