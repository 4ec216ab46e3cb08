"""Shrink a failing workload to a small one that fails the same way.

Hypothesis shrinks what Hypothesis drew; most campaign workloads come from generator families
(their own `random.Random`), and a found one must be reduced as a *workload*, whatever made
it. So this is delta debugging (Zeller's ddmin) over the workload's parts, each pass keeping a
change only when the pair still fails with the same signature (`task.Comparison.signature`:
level and field, stall side and reason, or exception type), so shrinking cannot slide from
one bug to another:

1. requests (ddmin over the list; a dropped request takes its plan and aborts along);
2. aborts, then plans (ddmin);
3. per request, the smallest `max_tokens` that still fails, by bisection (plans and
   `min_tokens` clamped to it);
4. per request, the shortest prompt prefix that still fails, by bisection (written as
   explicit token ids: the compact spec no longer describes it);
5. arrivals moved earlier by the first arrival's step.

Passes repeat until a round changes nothing, within a budget of runs and seconds (each run
is a whole lockstep run of the pair): what is returned always fails, shrunk as far as the
budget allowed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from workloads.model import AbortSpec, PlanSpec, RequestSpec, Workload

T = TypeVar("T")
Fails = Callable[[Workload], bool]


@dataclass(frozen=True, slots=True)
class Budget:
    runs: int = 150
    seconds: float = 180.0


class _Search:
    """The predicate with its budget: once spent, every candidate counts as passing, so each
    pass stops changing the workload and the best one so far is kept."""

    def __init__(self, fails: Fails, budget: Budget) -> None:
        self.fails = fails
        self.budget = budget
        self.runs = 0
        self.deadline = time.monotonic() + budget.seconds

    @property
    def spent(self) -> bool:
        return self.runs >= self.budget.runs or time.monotonic() >= self.deadline

    def __call__(self, candidate: Workload) -> bool:
        if self.spent:
            return False
        self.runs += 1
        return self.fails(candidate)


def shrink(workload: Workload, fails: Fails, budget: Budget = Budget()) -> tuple[Workload, int]:
    """The smallest failing workload found and how many runs it took (see module docstring).
    `workload` itself must fail; it is not run again."""
    search = _Search(fails, budget)
    best = workload
    while not search.spent:
        before = best
        best = _ddmin_field(best, "requests", search)
        best = _ddmin_field(best, "aborts", search)
        best = _ddmin_field(best, "plans", search)
        best = _bisect_each(best, search, lambda r: r.max_tokens, _with_tokens)
        best = _bisect_each(best, search, lambda r: r.prompt_len, _with_prompt)
        shifted = _earlier(best)
        if shifted is not None and search(shifted):
            best = shifted
        if best == before:
            break
    return best, search.runs


def _ddmin_field(workload: Workload, name: str, fails: Fails) -> Workload:
    items: tuple[object, ...] = getattr(workload, name)

    def build(kept: Sequence[object]) -> Workload:
        if name == "requests":
            return keep_requests(workload, [r for r in kept if isinstance(r, RequestSpec)])
        if name == "aborts":
            return replace(workload, aborts=tuple(a for a in kept if isinstance(a, AbortSpec)))
        return replace(workload, plans=tuple(p for p in kept if isinstance(p, PlanSpec)))

    def still_fails(subset: list[object]) -> bool:
        return bool(subset or name != "requests") and fails(build(subset))

    kept = ddmin(list(items), still_fails)
    return workload if len(kept) == len(items) else build(kept)


def ddmin(items: list[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """Zeller's ddmin, complements only: a 1-minimal sublist (as far as the predicate lets it
    run) for which `fails` holds, given that `fails(items)` holds. Tries the empty list last."""
    chunks = 2
    while items:
        chunks = min(chunks, len(items))
        size = -(-len(items) // chunks)
        for start in range(0, len(items), size):
            rest = items[:start] + items[start + size:]
            if fails(rest):
                items, chunks = rest, max(chunks - 1, 2)
                break
        else:
            if chunks >= len(items):
                return items
            chunks = min(2 * chunks, len(items))
    return items


def keep_requests(workload: Workload, requests: Sequence[RequestSpec]) -> Workload:
    """`workload` with only `requests` (and their plans and aborts)."""
    ids = {r.request_id for r in requests}
    return replace(workload, requests=tuple(requests),
                   plans=tuple(p for p in workload.plans if p.request_id in ids),
                   aborts=tuple(a for a in workload.aborts if a.request_id in ids))


def _bisect_each(workload: Workload, fails: Fails,
                 size: Callable[[RequestSpec], int],
                 resize: Callable[[Workload, int, int], Workload]) -> Workload:
    """Per request, the smallest size (max_tokens, prompt length) that still fails, by
    bisection over [1, size] (assuming a smaller size fails no more often: log2 runs)."""
    for index in range(len(workload.requests)):
        low, high = 1, size(workload.requests[index])
        while low < high:
            middle = (low + high) // 2
            candidate = resize(workload, index, middle)
            if fails(candidate):
                workload, high = candidate, middle
            else:
                low = middle + 1
    return workload


def _with_request(workload: Workload, index: int, request: RequestSpec,
                  plan: PlanSpec | None) -> Workload:
    requests = list(workload.requests)
    requests[index] = request
    rid = request.request_id
    plans = tuple(q for p in workload.plans
                  if (q := (plan if p.request_id == rid else p)) is not None)
    return replace(workload, requests=tuple(requests), plans=plans)


def _with_tokens(workload: Workload, index: int, tokens: int) -> Workload:
    """Request `index` with `max_tokens` cut to `tokens` (its plan and min_tokens follow)."""
    request = workload.requests[index]
    plan = workload.plan_for(request.request_id)
    if plan is not None and plan.eos_at is not None and plan.eos_at >= tokens:
        plan = replace(plan, eos_at=None)
        if plan.spec_acceptance is None:
            plan = None
    smaller = replace(request, max_tokens=tokens, min_tokens=min(request.min_tokens, tokens))
    return _with_request(workload, index, smaller, plan)


def _with_prompt(workload: Workload, index: int, length: int) -> Workload:
    """Request `index` with its prompt cut to its first `length` tokens (explicit ids: the
    compact spec no longer describes it)."""
    request = workload.requests[index]
    shorter = replace(request, prompt_token_ids=request.prompt_token_ids[:length],
                      prompt_spec=None)
    return _with_request(workload, index, shorter, workload.plan_for(request.request_id))


def _earlier(workload: Workload) -> Workload | None:
    first = min((r.arrival_step for r in workload.requests), default=0)
    if first == 0:
        return None
    return replace(
        workload,
        requests=tuple(replace(r, arrival_step=r.arrival_step - first)
                       for r in workload.requests),
        aborts=tuple(AbortSpec(a.request_id, max(0, a.step - first)) for a in workload.aborts))
