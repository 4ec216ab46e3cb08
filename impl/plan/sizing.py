"""Stage 3: how many blocks the memory holds, whether one full-length request fits, and the
tensors each group's layers live in.

One block id names one page in every layer of a group, and all groups share the pool, so a
block costs the largest group's pages summed over its layers. Groups alias the same bytes (a
block id belongs to one group at a time): with n groups of m layers there are m buffers, and
layer j of every group lives in buffer j (seed 001, "Memory Layout"). Where a layer's bytes go
depends on the layout:

    layer-outer (L first):  | layer 0 [ blk 0 | blk 1 | ... ] | layer 1 [ blk 0 | ... ] | ...
    block-outer (B first):  | blk 0 [ layer 0 | layer 1 | pad ] | blk 1 [ ... ] | ...

Before sizing, upstream checks that the memory (less one block, the null block the pool never
hands out) holds one request of `max_model_len` in every group at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from impl.plan.errors import PlanError
from impl.plan.grouping import PlannedGroup
from impl.plan.kv_specs import LayerKV, cdiv
from impl.plan.options import AXIS_B, AXIS_L, Layout, PlanOptions
from impl.plan.units import size


@dataclass(frozen=True, slots=True)
class PlannedTensor:
    """Layers of one group that share a spec: layer `layers[l]`'s page of block b starts at
    `offset + l * layer_stride + b * block_stride` in a buffer of `size` bytes."""

    size: int
    layers: tuple[str, ...]
    layer_stride: int
    block_stride: int
    offset: int


def bytes_per_block(groups: Sequence[PlannedGroup]) -> int:
    return max(sum(spec.page_size_bytes for spec in group.layer_specs) for group in groups)


def check_layout(layout: Layout, groups: Sequence[PlannedGroup]) -> None:
    """Pages of different sizes can only sit side by side in a block when each page is one
    contiguous run, and, with several groups aliasing, when blocks are outside layers."""
    pages = {spec.page_size_bytes for group in groups for spec in group.layer_specs}
    if len(pages) > 1 and (not layout.pages_contiguous
                           or (len(groups) > 1 and layout.layer_outermost)):
        raise PlanError("kv_cache_layout", f"layout {layout.name} cannot express this model's "
                        f"mixed page sizes ({sorted(pages)} bytes)")


def request_blocks(group: PlannedGroup, options: PlanOptions) -> int:
    """Blocks one request of `max_model_len` holds at most in this group."""
    specs = group.layer_specs if group.uniform_type else (group.spec,)
    return max(spec.blocks_per_request(options.max_model_len, options.max_in_flight_tokens,
                                       options.max_num_encoder_input_tokens)
               for spec in specs)


def request_bytes(groups: Sequence[PlannedGroup], options: PlanOptions) -> int:
    return bytes_per_block(groups) * sum(request_blocks(g, options) for g in groups)


def longest_request(groups: Sequence[PlannedGroup], options: PlanOptions, memory: int) -> int:
    """The largest `max_model_len` whose request still fits (0: not even one token)."""
    def fits(length: int) -> bool:
        return request_bytes(groups, _with_len(options, length)) <= memory

    low, high, best = 1, options.max_model_len, 0
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _with_len(options: PlanOptions, length: int) -> PlanOptions:
    return replace(options, max_model_len=length)


def check_memory(groups: Sequence[PlannedGroup], options: PlanOptions, memory: int) -> None:
    usable = memory - bytes_per_block(groups)
    if usable <= 0:
        raise PlanError("memory", f"no memory left for KV-cache blocks ({size(memory)}, and "
                        f"one block, the null block, takes {size(bytes_per_block(groups))})")
    needed = request_bytes(groups, options)
    if needed > usable:
        longest = longest_request(groups, options, usable)
        hint = f"; the longest that fits is {longest}" if longest else ""
        raise PlanError("memory", f"one request of max_model_len {options.max_model_len} needs "
                        f"{needed} bytes ({size(needed)}) of KV cache, more than the {usable} "
                        f"bytes ({size(usable)}) left besides the null block{hint}")


def _strides(spec: LayerKV, num_layers: int, num_blocks: int, layout: Layout,
             fixed_block_stride: int | None) -> tuple[int, int]:
    """(layer stride, block stride) in bytes over the logical axes [L, B, H, N, C], laid out
    innermost first in `layout` order. A padded page widens the stride of the innermost of the
    L and B axes, so the padding sits at the end of each page."""
    heads, slots, content = spec.axes()
    shape = (num_layers, num_blocks, heads, slots, content)
    order = layout.order
    padded = spec.page_size_padded
    grid_end = max(order.index(AXIS_L), order.index(AXIS_B)) + 1
    if padded is not None and grid_end > 2 and heads > 1:
        raise PlanError("kv_cache_layout", f"layout {layout.name} cannot pad a page of "
                        f"{heads} heads (an axis sits between layers and blocks)",
                        upstream_class="AssertionError")
    fixed = (None, fixed_block_stride, None, None, None)
    strides = [0] * 5
    current = 1
    for position in reversed(range(5)):
        axis = order[position]
        if padded is not None and position == grid_end - 1:
            current = max(current, padded)
        strides[axis] = fixed[axis] or current
        current = strides[axis] * shape[axis]
    return strides[AXIS_L], strides[AXIS_B]


def tensors(groups: Sequence[PlannedGroup], num_blocks: int, block_bytes: int,
            layout: Layout) -> tuple[PlannedTensor, ...]:
    """One tensor per (group, distinct layer spec); each group's offsets start at 0."""
    size = block_bytes * num_blocks
    fixed = block_bytes if layout.block_outermost else None
    out: list[PlannedTensor] = []
    for group in groups:
        by_spec: dict[LayerKV, list[str]] = {}
        for name, spec in zip(group.layer_names, group.layer_specs, strict=True):
            by_spec.setdefault(spec if group.uniform_type else group.spec, []).append(name)
        offset = 0
        for spec, names in by_spec.items():
            layer_stride, block_stride = _strides(spec, len(names), num_blocks, layout, fixed)
            out.append(PlannedTensor(size, tuple(names), layer_stride, block_stride, offset))
            offset += len(names) * (spec.page_size_bytes if layout.block_outermost
                                    else layer_stride)
    return tuple(out)


def num_blocks(memory: int, block_bytes: int, override: int | None) -> int:
    return override if override is not None else memory // block_bytes


__all__ = ["PlannedTensor", "bytes_per_block", "cdiv", "check_layout", "check_memory",
           "num_blocks", "request_blocks", "tensors"]
