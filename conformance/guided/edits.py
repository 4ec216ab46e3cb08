"""The small edits every mutation operator is made of: which requests may change, where the
boundaries are, and putting a changed workload back in the order a workload keeps."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from workloads.model import AbortSpec, PlanSpec, RequestSpec, Workload


def plain(request: RequestSpec) -> bool:
    """A request whose prompt can change freely (see the module docstring)."""
    return not (request.mm_items or request.stream or request.kv_transfer is not None
                or request.after is not None or request.resumable)


def units(workload: Workload) -> tuple[int, ...]:
    """The lengths whose multiples are boundaries: blocks, hash blocks, windows, chunks."""
    config = workload.config
    found = {config.block_size}
    if config.hash_block_size:
        found.add(config.hash_block_size)
    for group in config.kv_cache_groups:
        found.update(v for v in (group.sliding_window, group.attention_chunk_size,
                                 group.rswa_window) if v)
    return tuple(sorted(found))


def boundary(workload: Workload, rng: random.Random, most: int) -> int:
    """k * unit + {-1, 0, +1} for a drawn unit, clamped to [1, most]."""
    unit = rng.choice(units(workload))
    k = rng.randint(1, max(1, most // unit))
    return max(1, min(most, k * unit + rng.choice((-1, 0, 1))))


def room(workload: Workload, request: RequestSpec) -> int:
    """The longest prompt the request may have: its output must still fit the model."""
    return max(1, workload.config.max_model_len - request.max_tokens - 1)


def fresh_tokens(workload: Workload, rng: random.Random, count: int) -> tuple[int, ...]:
    """Tokens below the vocabulary's top ten (where stop and EOS ids tend to live)."""
    top = max(2, workload.vocab_size - 10)
    return tuple(rng.randrange(1, top) for _ in range(count))


def plain_indexes(workload: Workload) -> list[int]:
    return [i for i, r in enumerate(workload.requests) if plain(r)]


def pick_plain(workload: Workload, rng: random.Random) -> tuple[int, RequestSpec] | None:
    """One plain request drawn at random, with its index; None when there is none."""
    plain_ones = plain_indexes(workload)
    if not plain_ones:
        return None
    index = rng.choice(plain_ones)
    return index, workload.requests[index]


def set_request(workload: Workload, index: int, request: RequestSpec) -> Workload:
    requests = list(workload.requests)
    requests[index] = request
    return rebuilt(workload, requests)


def rebuilt(workload: Workload, requests: Sequence[RequestSpec],
             aborts: Sequence[AbortSpec] | None = None,
             plans: Sequence[PlanSpec] | None = None) -> Workload:
    """`workload` with these parts, put in the order a workload keeps: requests by arrival
    (stable), plans in request order, aborts by step and never before their request's
    arrival; plans and aborts of requests no longer there dropped."""
    ordered = tuple(sorted(requests, key=lambda r: r.arrival_step))
    arrival = {r.request_id: r.arrival_step for r in ordered}
    order = {r.request_id: i for i, r in enumerate(ordered)}
    kept_aborts = tuple(sorted((AbortSpec(a.request_id, max(a.step, arrival[a.request_id]))
                                for a in (workload.aborts if aborts is None else aborts)
                                if a.request_id in arrival), key=lambda a: a.step))
    kept_plans = tuple(sorted((p for p in (workload.plans if plans is None else plans)
                               if p.request_id in order), key=lambda p: order[p.request_id]))
    return replace(workload, requests=ordered, aborts=kept_aborts, plans=kept_plans)


def new_id(workload: Workload, stem: str) -> str:
    taken = {r.request_id for r in workload.requests}
    n = len(taken)
    while f"{stem}-m{n}" in taken:
        n += 1
    return f"{stem}-m{n}"


def with_prompt(request: RequestSpec, tokens: Sequence[int]) -> RequestSpec:
    """`request` with explicit prompt ids (the compact spec no longer describes them)."""
    return replace(request, prompt_token_ids=tuple(tokens), prompt_spec=None)
