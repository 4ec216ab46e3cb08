"""Liveness: notice that a run stopped making progress, instead of hanging or truncating it.

The driver feeds every finished step to a `LivenessMonitor`; when the monitor concludes that
the system can no longer get anywhere, the driver raises `Stalled`, which carries the step,
a reason and the system's queues and block counts, so a report can say *which* side stalled
and in what state. Reasons, cheapest signal first:

| reason           | fires when                                                             |
| ---------------- | ---------------------------------------------------------------------- |
| `never-admitted` | `patience` steps in a row with no token scheduled and no output, the    |
|                  | running queue empty and requests waiting (the detail says whether the   |
|                  | head of the queue could fit in the pool at all)                         |
| `no-progress`    | the same, with requests in the running queue                            |
| `livelock`       | tokens keep being scheduled but no request gains an output token or     |
|                  | finishes for longer than the whole workload's work, times `LIVELOCK_X`  |
| `step-cap`       | the driver's step limit (`default_max_steps`) is reached                 |

The idle reasons only fire once no abort is left in the workload's future: an abort may be
exactly what frees a stuck request, and it is the workload's right to wait for it; a step
with an abort counts as progress. Arrivals neither count nor hold a verdict back: a new
request cannot free a stuck one's blocks, and once admitted it schedules tokens, which is
progress (so a system that stops scheduling is caught even while requests keep arriving).
Nothing here looks inside a system:
the monitor sees only the canonical records and `SystemState`, so the twin and upstream are
judged by the same rule, and the same state on both sides gives the same verdict.

The `livelock` bound: without an output token every scheduled token is prefill (or recompute
after a preemption). A preemption can throw away at most what was computed since, and the
oldest running request is never the FCFS victim while others run, so a live run schedules
at most about twice the workload's total tokens between two outputs; `LIVELOCK_X = 4` keeps
a margin and still fires long before the step cap when the token budget is large.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.systems.protocol import SystemState
from workloads.model import Workload

STALL_PATIENCE = 16
"""Idle steps in a row (no tokens scheduled, no output) before an idle run is a stall."""

LIVELOCK_X = 4
"""Tokens scheduled since the last output, in units of the workload's total work."""

REASONS = ("never-admitted", "no-progress", "livelock", "step-cap")


class DriverStalled(RuntimeError):
    """The workload did not finish (kept as the base class for callers that caught it)."""


class Stalled(DriverStalled):
    """A system stopped making progress: where, why, and its queues and blocks at that point."""

    def __init__(self, system: str, workload: str, step: int, reason: str, detail: str,
                 state: SystemState) -> None:
        self.system = system
        self.workload = workload
        self.step = step
        self.reason = reason
        self.detail = detail
        self.state = state
        super().__init__(f"{system}: stalled at step {step} ({reason}): {detail}; "
                         f"{describe_state(state)}")

    def same_as(self, other: Stalled) -> bool:
        """Identical stalls (step, reason, queues) are agreement between two systems."""
        return (self.step, self.reason, self.state.running, self.state.waiting) == (
            other.step, other.reason, other.state.running, other.state.waiting)

    def to_json(self) -> dict[str, Any]:
        return {"system": self.system, "step": self.step, "reason": self.reason,
                "detail": self.detail, **state_json(self.state)}


def state_json(state: SystemState) -> dict[str, Any]:
    b = state.blocks
    return {"running": list(state.running), "waiting": list(state.waiting),
            "blocks": {"active": b.active, "cached": b.cached, "empty": b.empty}}


def describe_state(state: SystemState) -> str:
    """One line: queues (first ids) and block counts, for error messages."""
    def ids(queue: tuple[str, ...]) -> str:
        shown = ", ".join(queue[:6]) + (", ..." if len(queue) > 6 else "")
        return f"{len(queue)} [{shown}]"
    b = state.blocks
    return (f"running {ids(state.running)}, waiting {ids(state.waiting)}, "
            f"blocks active/cached/empty {b.active}/{b.cached}/{b.empty}")


class LivenessMonitor:
    """Watches one driver's steps; `observe` returns a `(reason, detail)` once stalled."""

    def __init__(self, workload: Workload, patience: int = STALL_PATIENCE) -> None:
        self.workload = workload
        self.patience = patience
        self.idle_steps = 0
        self.since_output = 0
        work = sum(r.prompt_len + r.max_tokens for r in workload.requests)
        self.livelock_tokens = LIVELOCK_X * work + workload.config.max_num_batched_tokens

    def observe(self, *, scheduled_tokens: int, outputs: int, aborting: bool,
                aborts_pending: bool, unfinished: bool,
                state: Callable[[], SystemState]) -> tuple[str, str] | None:
        """One finished step. `outputs`: requests that gained a token or finished in it;
        `aborting`: an abort happened in it; `aborts_pending`: more are to come;
        `state`: the system's state, asked for only once the run looks stalled (a snapshot
        costs a pass over the block pool)."""
        if outputs or aborting or not unfinished:
            self.idle_steps = 0
            self.since_output = 0
            return None
        self.since_output += scheduled_tokens
        if self.since_output > self.livelock_tokens:
            return "livelock", (f"{self.since_output} tokens scheduled since the last output "
                                f"token or finish, more than a live run needs "
                                f"({self.livelock_tokens})")
        self.idle_steps = 0 if scheduled_tokens else self.idle_steps + 1
        if self.idle_steps < self.patience or aborts_pending:
            return None
        now = state()
        if now.pinned:
            self.idle_steps = 0  # waiting on a timer: held KV pins expire on their own
            return None
        if not (now.waiting or now.running):
            # Nothing left to run, yet the engine steps: a connector's transfers draining (they
            # take at most their latency) or never ending (a connector that keeps copying).
            connector = self.workload.config.kv_connector
            drain = None if connector is None else max(connector.load_latency_steps,
                                                       connector.store_latency_steps)
            if drain is None:
                self.idle_steps = 0
                return None
            if self.idle_steps < self.patience + drain:
                return None
            return "no-progress", (f"no request left for {self.idle_steps} steps, yet the "
                                   "engine keeps stepping: the KV connector's transfers never "
                                   "end")
        if now.waiting and not now.running:
            return "never-admitted", self._admission_detail(now)
        return "no-progress", (f"no token scheduled for {self.idle_steps} steps with "
                               f"{len(now.running) + len(now.waiting)} requests unfinished")

    def _admission_detail(self, state: SystemState) -> str:
        head = state.waiting[0]
        spec = next((r for r in self.workload.requests if r.request_id == head), None)
        config = self.workload.config
        free = state.blocks.cached + state.blocks.empty
        base = f"waiting request {head} not admitted for {self.idle_steps} steps"
        if spec is None:
            return base
        need = -(-spec.prompt_len // config.scheduler_block_size) * len(config.kv_cache_groups)
        if need > config.usable_blocks:
            return (f"{base}: its prompt needs about {need} blocks, more than the pool's "
                    f"{config.usable_blocks} usable blocks (it can never fit)")
        return f"{base}: its prompt needs about {need} blocks and {free} are free (it fits)"
