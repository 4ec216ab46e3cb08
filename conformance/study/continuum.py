"""`vtwin study continuum`: FCFS and Continuum on the same agent workload, and what changed.

Both runs use the twin (exact against the rebuilt fork, `--verify` re-checks it for this
workload), the same driver and closed-loop arrivals, and seed 002's tracer. Per policy:

| metric              | from                                                                  |
| ------------------- | --------------------------------------------------------------------- |
| job completion time | first turn's arrival step to last turn's finishing step, inclusive    |
| turn queueing       | a turn's first scheduled step minus its arrival step                   |
| prefix hit rate     | hit tokens / tokens over admitted lookups (trace's prefix-cache events) |
| tokens computed     | every scheduled token: prefill, recompute after preemption, decode     |
| preemptions         | the step records                                                       |
| pin-blocked steps   | steps where requests wait, none is admitted and pins hold blocks       |
| series per step     | running, waiting, free / cached / active blocks, distinct pinned blocks |

A job with no `job_id` counts each of its requests as a job of its own.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any

from conformance.sched.driver import Driver
from conformance.systems.twin import ImplSystem
from impl.sched.tracing.tracer import (
    PrefixCacheEvent,
    StepDecision,
    StepSnapshot,
    Tracer,
    TraceRecord,
    record_json,
)
from vtwin.errors import UserError
from workloads.model import ContinuumConfig, Workload

POLICIES = ("fcfs", "continuum")


@dataclass(frozen=True, slots=True)
class PolicyRun:
    policy: str
    steps: int  # to the last finish (a run then steps on while its last pins expire)
    run_steps: int
    jct_steps: dict[str, int]
    queueing_steps: dict[str, int]
    hit_tokens: int
    lookup_tokens: int
    tokens_computed: int
    preemptions: int
    pin_blocked_steps: int
    series: dict[str, list[int]] = field(repr=False)
    trace: tuple[TraceRecord, ...] = field(repr=False, default=())

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    def summary(self, step_ms: float) -> dict[str, Any]:
        jct = list(self.jct_steps.values())
        return {
            "policy": self.policy, "steps": self.steps, "run_steps": self.run_steps,
            "makespan_ms": self.steps * step_ms,
            "jobs": len(jct), "jct_mean_steps": statistics.fmean(jct) if jct else 0.0,
            "jct_p50_steps": _quantile(jct, 0.5), "jct_p90_steps": _quantile(jct, 0.9),
            "jct_mean_ms": (statistics.fmean(jct) if jct else 0.0) * step_ms,
            "queueing_mean_steps": statistics.fmean(self.queueing_steps.values())
            if self.queueing_steps else 0.0,
            "prefix_hit_rate": round(self.hit_rate, 4), "tokens_computed": self.tokens_computed,
            "preemptions": self.preemptions, "pin_blocked_steps": self.pin_blocked_steps,
            "max_pinned_blocks": max(self.series["pinned"], default=0),
        }


def _quantile(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def with_policy(workload: Workload, policy: str, **continuum: Any) -> Workload:
    """`workload` under `policy` (continuum settings from the workload, else the defaults,
    with `continuum` overrides such as `estimator` or `ttl_ms`)."""
    step_ms = workload.step_ms
    if step_ms is None:
        raise UserError(f"workload {workload.name!r}: the study needs 'step_ms' in its header "
                        "(pins and job completion times are in milliseconds)")
    settings = workload.config.continuum or ContinuumConfig(step_ms=step_ms)
    settings = dataclasses.replace(settings, **{k: v for k, v in continuum.items()
                                                if v is not None})
    config = dataclasses.replace(workload.config, policy=policy, continuum=settings)  # type: ignore[arg-type]
    return dataclasses.replace(workload, config=config)


def run_policy(workload: Workload, policy: str) -> PolicyRun:
    system = ImplSystem(workload.config)
    tracer = Tracer()
    system.attach_tracer(tracer)
    driver = Driver(system, workload, integrity_every=1, snapshot_before=False)
    series: dict[str, list[int]] = {k: [] for k in ("running", "waiting", "active", "cached",
                                                    "empty", "pinned")}
    first_scheduled: dict[str, int] = {}
    finished: dict[str, int] = {}
    preemptions = tokens = blocked = 0
    trace: list[TraceRecord] = []
    for done in driver.steps():
        record = done.record
        for rid, _ in record.num_scheduled_tokens:
            first_scheduled.setdefault(rid, record.step)
        for out in record.outputs:
            if out.finish_reason is not None:
                finished[out.req_id] = record.step
        preemptions += len(record.preempted)
        tokens += record.total_num_scheduled_tokens
        new = tracer.take()
        trace += new
        pinned = next((r.pinned_unique_blocks for r in new if isinstance(r, StepSnapshot)), 0)
        blocked += bool(record.num_waiting and not record.scheduled_new and pinned)
        series["running"].append(record.num_running)
        series["waiting"].append(record.num_waiting)
        series["active"].append(record.blocks.active)
        series["cached"].append(record.blocks.cached)
        series["empty"].append(record.blocks.empty)
        series["pinned"].append(pinned)
    hits, looked = _hits(trace)
    arrived = driver.arrivals.arrived
    jobs: dict[str, list[str]] = {}
    for request in workload.requests:
        jobs.setdefault(request.job_id or request.request_id, []).append(request.request_id)
    jct = {job: max(finished.get(r, len(series["running"])) for r in ids)
           - min(arrived[r] for r in ids) + 1 for job, ids in jobs.items()}
    queueing = {rid: first_scheduled[rid] - step for rid, step in arrived.items()
                if rid in first_scheduled}
    last_finish = max(finished.values(), default=len(series["running"]) - 1)
    return PolicyRun(policy, last_finish + 1, len(series["running"]), jct, queueing, hits,
                     looked, tokens,
                     preemptions, blocked, series, tuple(trace))


def _hits(records: list[TraceRecord]) -> tuple[int, int]:
    """Hit and looked-up tokens of the lookups whose request was admitted in that step."""
    admitted: set[tuple[int, str]] = set()
    for record in records:
        if isinstance(record, StepDecision):
            admitted.update((record.step, rid) for rid in record.scheduled_new_req_ids
                            + record.scheduled_resumed_req_ids)
    hits = looked = 0
    for record in records:
        if isinstance(record, PrefixCacheEvent) and (record.step, record.req_id) in admitted:
            hits += record.local_hit_tokens
            looked += record.num_tokens
    return hits, looked


@dataclass(frozen=True, slots=True)
class Study:
    workload: Workload
    runs: tuple[PolicyRun, ...]
    fork_exact: bool | None  # None: not verified

    @property
    def traces(self) -> dict[str, list[dict[str, Any]]]:
        """Each run's seed 002 trace, as JSONL lines."""
        return {r.policy: [record_json(x) for x in r.trace] for r in self.runs}

    def verdict(self) -> list[str]:
        """Plain sentences: who wins on what, and where Continuum does not."""
        step_ms = self.workload.step_ms or 1.0
        fcfs, cont = (r.summary(step_ms) for r in self.runs)
        a, b = self.runs
        lines = []
        change = (cont["jct_mean_steps"] - fcfs["jct_mean_steps"]) / max(fcfs["jct_mean_steps"],
                                                                          1e-9)
        faster = sum(b.jct_steps[j] < a.jct_steps[j] for j in a.jct_steps)
        slower = sorted((j for j in a.jct_steps if b.jct_steps[j] > a.jct_steps[j]),
                        key=lambda j: a.jct_steps[j] - b.jct_steps[j])
        word = "wins" if change < 0 else "does not win"
        lines.append(f"Continuum {word} on mean job completion time: {cont['jct_mean_ms']:.0f} ms "
                     f"vs FCFS {fcfs['jct_mean_ms']:.0f} ms ({change:+.1%}); {faster} of "
                     f"{len(a.jct_steps)} jobs finish sooner, {len(slower)} later.")
        lines.append(f"Prefix hit rate {cont['prefix_hit_rate']:.1%} vs "
                     f"{fcfs['prefix_hit_rate']:.1%}; "
                     f"tokens computed {cont['tokens_computed']} vs {fcfs['tokens_computed']}; "
                     f"preemptions {cont['preemptions']} vs {fcfs['preemptions']}; makespan "
                     f"{cont['steps']} vs {fcfs['steps']} steps.")
        saved = 1 - cont["tokens_computed"] / max(fcfs["tokens_computed"], 1)
        amount = f"{abs(saved):.1%} {'fewer' if saved >= 0 else 'more'}"
        lines.append(f"Continuum computes {amount} tokens. Time here is steps x "
                     "step_ms and a step costs the same whatever it computes, so prefill that "
                     "pins save shortens no step: it shows in tokens computed, not in job "
                     "completion time; what pins cost (admission waiting for them) does show.")
        if slower:
            worst = ", ".join(f"{j} (+{b.jct_steps[j] - a.jct_steps[j]} steps)"
                              for j in slower[:5])
            lines.append(f"Where it does not win: {worst}. Pins held up to "
                         f"{cont['max_pinned_blocks']} blocks; in {cont['pin_blocked_steps']} "
                         "steps requests waited, none was admitted, and pins held blocks "
                         "(pins are never reclaimed for admission, only released at their TTL).")
        if self.fork_exact is not None:
            lines.append("The twin's continuum run is exact against the rebuilt fork "
                         f"(continuum-fork) on this workload: {self.fork_exact}.")
        return lines

    def to_json(self) -> dict[str, Any]:
        step_ms = self.workload.step_ms or 1.0
        return {"workload": self.workload.name, "step_ms": step_ms,
                "config": self.workload.config.to_dict(),
                "runs": [r.summary(step_ms) for r in self.runs],
                "jct_steps": {r.policy: r.jct_steps for r in self.runs},
                "fork_exact": self.fork_exact, "verdict": self.verdict()}


def run_study(workload: Workload, verify: bool = False, **continuum: Any) -> Study:
    runs = tuple(run_policy(with_policy(workload, p, **continuum), p) for p in POLICIES)
    fork_exact = None
    if verify:
        from conformance.sched.lockstep import run_lockstep
        from conformance.systems.registry import factory_for
        from conformance.systems.specs import parse_spec
        result = run_lockstep(with_policy(workload, "continuum", **continuum),
                              factory_for(parse_spec("impl")),
                              factory_for(parse_spec("continuum-fork")))
        fork_exact = result.error is None and result.divergence_at("exact") is None
    return Study(workload, runs, fork_exact)
