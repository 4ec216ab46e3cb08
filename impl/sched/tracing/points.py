"""The twin's three trace points, built from the scheduler's own objects (tracing on only).

Kept out of the scheduler so that its hot path holds one `if tracer is not None` per point.
Step numbers are the continuum clock's when the policy is on, else the tracer's count of
schedule() calls; the snapshot fixes the step the other two records of that call carry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.sched.tracing.tracer import PrefixCacheEvent, StepDecision, StepSnapshot, Tracer

if TYPE_CHECKING:
    from impl.sched.output import SchedulerOutput
    from impl.sched.request import Request
    from impl.sched.state import SchedulerState


def snapshot(scheduler: SchedulerState, tracer: Tracer) -> None:
    pool = scheduler.kv_cache_manager.block_pool
    policy = scheduler.continuum
    pins = [] if policy is None else policy.pins
    tracer.step = tracer.calls if policy is None else policy.now_step
    tracer.calls += 1
    tracer.add(StepSnapshot(
        step=tracer.step, num_running=len(scheduler.running),
        num_waiting=len(scheduler.waiting) + len(scheduler.kv_holding_waiting),
        free_blocks=pool.get_num_free_blocks(), total_blocks=pool.num_gpu_blocks,
        gpu_cached_blocks=sum(1 for b in pool.blocks if b.block_hash is not None),
        cpu_free_blocks=None, cpu_total_blocks=None, cpu_cached_blocks=None,
        num_pinned=len(pins), pinned_blocks=0 if policy is None else policy.pinned_blocks(),
        pinned_job_ids=tuple(p.request.job_id for p in pins if p.request.job_id),
        max_num_running_reqs=scheduler.max_num_running_reqs,
        max_num_scheduled_tokens=scheduler.max_num_scheduled_tokens,
        pinned_unique_blocks=0 if policy is None else policy.pinned_unique_blocks()))


def prefix_cache_event(tracer: Tracer, request: Request, local_hit_tokens: int) -> None:
    tracer.add(PrefixCacheEvent(
        step=tracer.step, req_id=request.request_id, job_id=request.job_id,
        local_hit_tokens=local_hit_tokens, external_hit_tokens=0,
        total_prompt_tokens=request.num_prompt_tokens, num_tokens=request.num_tokens))


def decision(tracer: Tracer, output: SchedulerOutput) -> None:
    cached = output.scheduled_cached_reqs
    resumed = set(cached.resumed_req_ids)
    tracer.add(StepDecision(
        step=tracer.step,
        scheduled_new_req_ids=tuple(r.req_id for r in output.scheduled_new_reqs),
        scheduled_resumed_req_ids=tuple(r for r in cached.req_ids if r in resumed),
        scheduled_running_req_ids=tuple(r for r in cached.req_ids if r not in resumed),
        preempted_req_ids=tuple(sorted(output.preempted_req_ids or ())),
        num_scheduled_tokens=tuple(output.num_scheduled_tokens.items()),
        total_scheduled_tokens=output.total_num_scheduled_tokens))
