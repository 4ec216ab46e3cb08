"""`PrefillCadence`: hold prefill work back so decodes run in longer uninterrupted stretches.

With `prefill_schedule_interval = N > 1`, vLLM 0.33 lets prefill (new admissions with prompt
left to compute, and running requests still mid-prompt) into a step only once N executed steps
have passed since the last step that carried prefill; the steps in between run decodes alone.
Two escapes keep it from starving: nothing is held while no running request is decoding, and
once a step that was free to admit still left requests waiting (the engine is
capacity-bound), holding stops until a free step drains the queue. 0.32 applies the interval
only across data-parallel ranks, never in a single engine (`Behaviour.local_prefill_interval`).

Steps are counted only when they schedule something: an empty `schedule()` call does not
bring the next prefill closer.

A data-parallel rank is throttled from outside instead: the engine core of a DP deployment
passes `throttle_prefills` on steps off its cadence (both releases), and the same two escapes
apply (no running decode, or capacity-bound).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from impl.sched.request import Request


@dataclass(slots=True)
class PrefillCadence:
    interval: int  # 1: never hold
    capacity_bound: bool = False
    executed_steps: int = 0
    last_prefill_step: int = field(init=False)

    def __post_init__(self) -> None:
        self.last_prefill_step = -self.interval  # the first step is never held

    def holds_prefill(self, running: Iterable[Request], throttled: bool = False) -> bool:
        """Whether the step about to be scheduled keeps prefill out: throttled by a DP engine
        core, or within the local interval."""
        return ((throttled or (self.interval > 1 and self.executed_steps + 1
                               - self.last_prefill_step < self.interval))
                and not self.capacity_bound and any(not r.is_prefill_chunk for r in running))

    def admission_done(self, num_still_waiting: int) -> None:
        """After a step free to admit: requests left waiting mean the engine is saturated."""
        self.capacity_bound = num_still_waiting > 0

    def step_done(self, num_scheduled_tokens: int, carried_prefill: bool) -> None:
        if num_scheduled_tokens > 0:
            self.executed_steps += 1
        if self.interval > 1 and carried_prefill:
            self.last_prefill_step = self.executed_steps
