"""Mutation operators on a workload's requests: prompts and outputs at boundaries, shared
prefixes, repeats after eviction, arrivals, bursts, aborts, drops and splices (`mutate`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from conformance.campaign.shrink import keep_requests
from conformance.guided.edits import (
    boundary,
    fresh_tokens,
    new_id,
    pick_plain,
    plain,
    plain_indexes,
    rebuilt,
    room,
    set_request,
    with_prompt,
)
from workloads.model import AbortSpec, PlanSpec, Workload


def prompt_at_boundary(workload: Workload, rng: random.Random,
                       donors: Sequence[Workload]) -> Workload | None:
    """A prompt cut or grown to a boundary, one token either side of it or on it."""
    del donors
    picked = pick_plain(workload, rng)
    if picked is None:
        return None
    index, request = picked
    length = boundary(workload, rng, room(workload, request))
    tokens = request.prompt_token_ids[:length]
    tokens += fresh_tokens(workload, rng, length - len(tokens))
    return set_request(workload, index, with_prompt(request, tokens))


def share_prefix(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """One request's prompt starts with another's first tokens, cut at a boundary: a hit."""
    del donors
    plain_ones = plain_indexes(workload)
    if len(plain_ones) < 2:
        return None
    source, target = rng.sample(plain_ones, 2)
    shared = workload.requests[source].prompt_token_ids
    request = workload.requests[target]
    length = min(len(shared), boundary(workload, rng, room(workload, request)))
    rest = request.prompt_token_ids[length:] or fresh_tokens(workload, rng, rng.randint(1, 8))
    tokens = (shared[:length] + rest)[:room(workload, request)]
    return set_request(workload, target, with_prompt(request, tokens))


def repeat_later(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """A request asked again after the others: its blocks may be evicted in part by then, so
    the hit meets a hole, or grows past where the first run stopped."""
    del donors
    picked = pick_plain(workload, rng)
    if picked is None:
        return None
    _, request = picked
    last = max(r.arrival_step for r in workload.requests)
    tokens = request.prompt_token_ids
    if rng.random() < 0.5:
        cut = boundary(workload, rng, len(tokens))
        tokens = tokens[:cut] + fresh_tokens(workload, rng, rng.randint(0, 24))
    again = replace(with_prompt(request, tokens[:room(workload, request)]),
                    request_id=new_id(workload, request.request_id),
                    arrival_step=last + rng.randint(0, 12))
    return rebuilt(workload, (*workload.requests, again))


def move_arrival(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """A request arrives earlier or later (together with others, or alone)."""
    del donors
    picked = pick_plain(workload, rng)
    if picked is None:
        return None
    index, request = picked
    steps = sorted({r.arrival_step for r in workload.requests})
    step = rng.choice(steps) if rng.random() < 0.5 else max(
        0, request.arrival_step + rng.randint(-6, 6))
    return set_request(workload, index, replace(request, arrival_step=step))


def output_at_boundary(workload: Workload, rng: random.Random,
                       donors: Sequence[Workload]) -> Workload | None:
    """An output that ends on a boundary of prompt + output or one token either side of it:
    a block, hash block, window or chunk boundary, or (one time in four) the context cap,
    where a request must stop for length."""
    del donors
    picked = pick_plain(workload, rng)
    if picked is None:
        return None
    index, request = picked
    cap = workload.config.max_model_len
    at_cap = rng.random() < 0.25
    end = cap + rng.choice((-1, 0, 1)) if at_cap else boundary(workload, rng, cap - 1)
    tokens = max(1, min(end - request.prompt_len, cap + 1 - request.prompt_len, 512))
    plans = tuple(p for p in workload.plans if p.request_id != request.request_id)
    plan = workload.plan_for(request.request_id)
    if plan is not None:
        eos = plan.eos_at if plan.eos_at is not None and plan.eos_at < tokens else None
        if eos is not None or plan.spec_acceptance is not None:
            plans += (PlanSpec(request.request_id, eos, plan.spec_acceptance),)
    shorter = replace(request, max_tokens=tokens, min_tokens=min(request.min_tokens, tokens))
    requests = list(workload.requests)
    requests[index] = shorter
    return rebuilt(workload, requests, plans=plans)


def drop_request(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """One request fewer (its plan and aborts go with it)."""
    del donors
    if len(workload.requests) < 2:
        return None
    gone = rng.randrange(len(workload.requests))
    return keep_requests(workload, [r for i, r in enumerate(workload.requests) if i != gone])


def burst(workload: Workload, rng: random.Random,
          donors: Sequence[Workload]) -> Workload | None:
    """Copies of one request arriving together: seats, budget and pool run out at once."""
    del donors
    picked = pick_plain(workload, rng)
    if picked is None:
        return None
    _, request = picked
    requests = list(workload.requests)
    for n in range(rng.randint(1, 4)):
        requests.append(replace(request, request_id=f"{new_id(workload, request.request_id)}"
                                                    f"-{n}"))
    return rebuilt(workload, requests)


def splice(workload: Workload, rng: random.Random,
           donors: Sequence[Workload]) -> Workload | None:
    """A plain request from another corpus entry joins this one."""
    pool = [(d, r) for d in donors if d.vocab_size == workload.vocab_size
            for r in d.requests if plain(r) and r.prompt_len <= room(workload, r)]
    if not pool:
        return None
    donor, request = rng.choice(pool)
    plan = donor.plan_for(request.request_id)
    joined = replace(request, request_id=new_id(workload, "spliced"),
                     lora_name=None, priority=0, cache_salt=None, grammar=None)
    plans = workload.plans
    if plan is not None:
        plans += (replace(plan, request_id=joined.request_id),)
    return rebuilt(workload, (*workload.requests, joined), plans=plans)


def abort_one(workload: Workload, rng: random.Random,
              donors: Sequence[Workload]) -> Workload | None:
    """The client aborts a request a few steps after it arrives."""
    del donors
    aborted = {a.request_id for a in workload.aborts}
    open_ones = [r for r in workload.requests if r.request_id not in aborted
                 and r.stream_end_step is None]
    if not open_ones:
        return None
    request = rng.choice(open_ones)
    abort = AbortSpec(request.request_id, request.arrival_step + rng.randint(0, 10))
    return rebuilt(workload, workload.requests, aborts=(*workload.aborts, abort))
