"""Workload mutations: AFL's havoc, on workloads instead of bytes.

A corpus entry that reached something new is worth varying: the states the harness misses are
a step away from the ones it reaches (a hole one eviction inside a cached run, a prompt one
token past a window's boundary, a hit that a third group shortens). Each operator below makes
one such step; `havoc` stacks one to four of them, and `valid` keeps only what the workload
format accepts (the writer and the loader's checks, so a mutant is a file `vtwin conform` runs).

Operators touch *plain* requests only (no multimodal items, stream parts, P/D transfer or
closed-loop predecessor), whose prompt is a token list with no other field pinned to it. Every
operator is a pure function of (workload, rng, donors): the same seed makes the same mutant.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from conformance.guided import config_ops, request_ops
from workloads.model import Workload

Operator = Callable[[Workload, random.Random, Sequence[Workload]], Workload | None]
"""(workload, rng, donors) -> a mutant, or None when the operator does not apply."""
MAX_STACK = 4
"""Havoc applies one to this many operators, each to the previous one's output."""


OPERATORS: dict[str, Operator] = {
    "prompt_at_boundary": request_ops.prompt_at_boundary,
    "share_prefix": request_ops.share_prefix,
    "repeat_later": request_ops.repeat_later,
    "tighter_pool": config_ops.tighter_pool,
    "move_arrival": request_ops.move_arrival,
    "output_at_boundary": request_ops.output_at_boundary,
    "drop_request": request_ops.drop_request,
    "burst": request_ops.burst,
    "splice": request_ops.splice,
    "abort_one": request_ops.abort_one,
    "other_config": config_ops.other_config,
    "window_at_boundary": config_ops.window_at_boundary,
    "add_group": config_ops.add_group,
    "cap_at_boundary": config_ops.cap_at_boundary,
    "cross_aspect": config_ops.cross_aspect,
}


def havoc(workload: Workload, rng: random.Random,
          donors: Sequence[Workload]) -> tuple[Workload, tuple[str, ...]] | None:
    """One to `MAX_STACK` operators stacked, and their names; None when none applied or the
    result is not a valid workload."""
    applied: list[str] = []
    mutant = workload
    for _ in range(rng.randint(1, MAX_STACK)):
        name = rng.choice(tuple(OPERATORS))
        changed = OPERATORS[name](mutant, rng, donors)
        if changed is not None:
            mutant, applied = changed, [*applied, name]
    if not applied:
        return None
    checked = valid(mutant)
    return None if checked is None else (checked, tuple(applied))


def valid(workload: Workload) -> Workload | None:
    """The workload as the format reads it back (every check of a file on it), or None; also
    None under async scheduling with what the twin refuses there (`families.async_gap`: a
    known gap, not a finding)."""
    from conformance.campaign.families import async_gap
    from vtwin.errors import UserError
    from workloads import dumps, loads
    if workload.config.async_scheduling and async_gap(workload) is not None:
        return None
    try:
        return loads(dumps(workload), source=workload.name)
    except (UserError, ValueError):
        return None
