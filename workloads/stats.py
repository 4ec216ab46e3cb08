"""Summary statistics of a workload, as printed by ``vtwin workloads show``.

The prefix-sharing ratio is the share of full prompt blocks whose content, including everything
before it in the prompt, already appeared in an earlier request: what a prefix cache large
enough to never evict would hit. Blocks are keyed by their parent block and their exact tokens,
so the count is exact (no hash collisions), and the cache salt and LoRA name start separate
chains, as they do in vLLM's block hashes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from workloads.model import RequestSpec, Workload

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Sharing:
    """`seen` of `total` full prompt blocks had appeared in an earlier request."""

    seen: int
    total: int

    @property
    def ratio(self) -> float:
        return self.seen / self.total if self.total else 0.0


def prefix_sharing(requests: Iterable[RequestSpec], block_size: int) -> Sharing:
    """Prefix sharing over `requests` in the given (arrival) order."""
    # A block is its parent's node id plus its tokens; node ids are dense ints. Each
    # (salt, LoRA) pair has its own negative root id.
    nodes: dict[tuple[int, tuple[int, ...]], int] = {}
    roots: dict[tuple[str | None, str | None], int] = {}
    seen = total = 0
    for request in requests:
        parent = roots.setdefault((request.cache_salt, request.lora_name), -1 - len(roots))
        full = request.prompt_len // block_size
        if not full:
            continue
        tokens = request.prompt_token_ids
        index = 0
        # Walk the part of the chain that earlier requests already made...
        while index < full:
            node = nodes.get((parent, tokens[index * block_size : (index + 1) * block_size]))
            if node is None:
                break
            parent = node
            index += 1
        # ...the rest is new, and so is every block after it, since its parent is new.
        for start in range(index * block_size, full * block_size, block_size):
            node = len(nodes)
            nodes[(parent, tokens[start : start + block_size])] = node
            parent = node
        seen += index
        total += full
    return Sharing(seen, total)


def percentiles(values: Sequence[int]) -> dict[str, int]:
    """Nearest-rank percentiles plus min and max (all zero for an empty sequence)."""
    if not values:
        return {"min": 0, **{f"p{p}": 0 for p in PERCENTILES}, "max": 0}
    ordered = sorted(values)
    out = {"min": ordered[0]}
    for p in PERCENTILES:
        rank = max(1, math.ceil(p / 100 * len(ordered)))
        out[f"p{p}"] = ordered[rank - 1]
    out["max"] = ordered[-1]
    return out


@dataclass(frozen=True, slots=True)
class Summary:
    name: str
    description: str
    requests: int
    aborts: int
    plans: int
    prompt_tokens: int
    max_output_tokens: int
    block_size: int
    shared_blocks: int
    prompt_blocks: int
    sharing_ratio: float
    first_arrival_step: int
    last_arrival_step: int
    arrivals_per_step: float
    arrivals_per_second: float | None
    prompt_len: dict[str, int]
    max_tokens: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(workload: Workload) -> Summary:
    requests = workload.requests
    sharing = prefix_sharing(requests, workload.config.block_size)
    first = requests[0].arrival_step if requests else 0
    last = requests[-1].arrival_step if requests else 0
    # n arrivals spread over steps first..last: the rate is per step of that span.
    rate = len(requests) / (last - first + 1) if requests else 0.0
    per_second = None if workload.step_ms is None else rate * 1000.0 / workload.step_ms
    return Summary(
        name=workload.name,
        description=workload.description,
        requests=len(requests),
        aborts=len(workload.aborts),
        plans=len(workload.plans),
        prompt_tokens=sum(r.prompt_len for r in requests),
        max_output_tokens=sum(r.max_tokens for r in requests),
        block_size=workload.config.block_size,
        shared_blocks=sharing.seen,
        prompt_blocks=sharing.total,
        sharing_ratio=sharing.ratio,
        first_arrival_step=first,
        last_arrival_step=last,
        arrivals_per_step=rate,
        arrivals_per_second=per_second,
        prompt_len=percentiles([r.prompt_len for r in requests]),
        max_tokens=percentiles([r.max_tokens for r in requests]),
    )


def format_summary(summary: Summary) -> str:
    def dist(values: dict[str, int]) -> str:
        return "  ".join(f"{k}={v}" for k, v in values.items())

    rate = f"{summary.arrivals_per_step:.3f} requests/step"
    if summary.arrivals_per_second is not None:
        rate += f" ({summary.arrivals_per_second:.2f} requests/s)"
    lines = [
        f"name:              {summary.name}",
        f"description:       {summary.description}",
        f"requests:          {summary.requests} "
        f"({summary.aborts} aborted, {summary.plans} planned)",
        f"prompt tokens:     {summary.prompt_tokens}",
        f"max output tokens: {summary.max_output_tokens}",
        f"prefix sharing:    {summary.sharing_ratio:.4f} ({summary.shared_blocks} of "
        f"{summary.prompt_blocks} prompt blocks of {summary.block_size} seen before)",
        f"arrivals:          steps {summary.first_arrival_step}..{summary.last_arrival_step}, "
        f"{rate}",
        f"prompt length:     {dist(summary.prompt_len)}",
        f"max_tokens:        {dist(summary.max_tokens)}",
    ]
    return "\n".join(lines)
