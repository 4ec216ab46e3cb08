"""Groups for block-outer layouts whose layers' pages differ: packing instead of unifying.

When blocks are the outermost axis, one block is a run of pages side by side, so pages of
different sizes can share a block without growing or padding any of them. The planner then:

1. buckets layers greedily by type (a layer joins the first bucket it is uniform with: same
   block size, same type);
2. reads each bucket as a repeating pattern with one layer per page size when every page size
   has the same number of layers ("balanced"); the number of pattern repeats per group is the
   divisor that wastes the fewest padding repeats over all balanced buckets, no smaller than
   the largest balanced mixed bucket (which must stay whole);
3. splits balanced buckets into that many repeats per group (dealt round-robin), keeps other
   buckets whole, and splits state buckets (mamba; windows when nothing repeats) into as many
   groups as needed so that each fits in the block the others already need.

Upstream keeps one quirk we keep too: an unbalanced bucket with several page sizes split into
groups only keeps complete pattern repeats, so layers drop out, and a group can come out empty.
Upstream then fails (an assertion, or `StopIteration` on the empty group); so does the twin,
naming the same exception class.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from impl.plan.errors import PlanError
from impl.plan.grouping import PlannedGroup, uniform_type
from impl.plan.kv_specs import AttentionKV, LayerKV, MambaKV, cdiv


@dataclass(frozen=True, slots=True)
class Bucket:
    names: tuple[str, ...]
    specs: tuple[LayerKV, ...]

    @property
    def by_page(self) -> dict[int, list[str]]:
        """Layer names per page size, page sizes in order of first appearance."""
        out: dict[int, list[str]] = {}
        for name, spec in zip(self.names, self.specs, strict=True):
            out.setdefault(spec.page_size_bytes, []).append(name)
        return out

    @property
    def balanced(self) -> bool:
        return len({len(names) for names in self.by_page.values()}) == 1

    @property
    def repeats(self) -> int:
        """Layers of the most common page size: the pattern's repeats when balanced."""
        return Counter(spec.page_size_bytes for spec in self.specs).most_common(1)[0][1]


def buckets(specs: dict[str, LayerKV]) -> list[Bucket]:
    names: list[list[str]] = []
    members: list[list[LayerKV]] = []
    for name, spec in specs.items():
        for bucket_names, bucket_specs in zip(names, members, strict=True):
            if uniform_type([*bucket_specs, spec]):
                bucket_names.append(name)
                bucket_specs.append(spec)
                break
        else:
            names.append([name])
            members.append([spec])
    return [Bucket(tuple(n), tuple(s)) for n, s in zip(names, members, strict=True)]


def least_padding_divisor(values: Sequence[int], lower_bound: int) -> int:
    """The d >= lower_bound (up to max(values)) that pads the values least when each is rounded
    up to a multiple of d; ties go to the larger d."""
    best, best_pad = max(1, lower_bound), -1
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum(-x % d for x in values)
        if best_pad < 0 or pad <= best_pad:
            best, best_pad = d, pad
    return best


def _is_state(bucket: Bucket, repeats: int | None) -> bool:
    first = bucket.specs[0]
    return isinstance(first, MambaKV) or (
        repeats is None and isinstance(first, AttentionKV) and first.kind == "sliding_window")


def pack_groups(specs: dict[str, LayerKV]) -> list[PlannedGroup]:
    found = buckets(specs)
    floor = max((b.repeats for b in found if b.balanced and len(b.by_page) > 1), default=0)
    repeats = (least_padding_divisor([b.repeats for b in found if b.balanced], floor)
               if floor else None)

    def groups_for(bucket: Bucket) -> int:
        return cdiv(bucket.repeats, repeats) if bucket.balanced and repeats is not None else 1

    def widest(bucket: Bucket, count: int) -> int:
        return sum(cdiv(len(names), count) * page for page, names in bucket.by_page.items())

    anchor = max(widest(b, len(b.specs) if _is_state(b, repeats) else groups_for(b))
                 for b in found)
    groups: list[PlannedGroup] = []
    for bucket in found:
        count = groups_for(bucket)
        if anchor and _is_state(bucket, repeats):
            per_block = max(anchor // bucket.specs[0].page_size_bytes, 1)
            count = max(count, cdiv(len(bucket.specs), per_block))
        if count == 1:
            groups.append(PlannedGroup(bucket.names, bucket.specs[0], bucket.specs, True))
            continue
        spec_of = dict(zip(bucket.names, bucket.specs, strict=True))
        pattern = list(zip(*bucket.by_page.values(), strict=False))  # complete repeats only
        for index in range(count):
            names = tuple(name for repeat in pattern[index::count] for name in repeat)
            if not names:
                raise PlanError("layers", f"packing splits {len(bucket.names)} layers of "
                                "unequal page counts into an empty group",
                                upstream_class="StopIteration")
            layer_specs = tuple(spec_of[name] for name in names)
            groups.append(PlannedGroup(names, layer_specs[0], layer_specs, True))
    return groups


def check_all_placed(groups: Sequence[PlannedGroup], specs: dict[str, LayerKV]) -> None:
    placed = sum(len(group.layer_names) for group in groups)
    if placed != len(specs):
        raise PlanError("layers", f"packing places {placed} of {len(specs)} layers (the pattern "
                        "of an unbalanced bucket drops the rest)", upstream_class="AssertionError")
