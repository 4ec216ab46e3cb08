"""Hypothesis strategy for continuum workloads: agent jobs in closed loop over tiny pools.

Separate from `strategies.workloads` (whose distribution other tests rely on). Each example
draws a pool from barely one request of `max_model_len` to a few, a few seats and a small
budget, the policy's settings (TTLs from shorter than a step to past the threshold, both
estimators, a threshold that refuses every pin), then jobs: chains of turns `after` one
another with gaps from 0 to 1 s, a shared system prefix across jobs, jobs with no id (never
pinned), a turn marked last in the middle of a chain (no pin there, the job continues), plus
timed requests outside any job and the odd abort. Pressure makes preemption choose between
pinned and unpinned jobs, and pins hold blocks that admission then waits for.

Imported by tests only (it needs Hypothesis).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from workloads.model import (
    AbortSpec,
    AfterSpec,
    ContinuumConfig,
    EngineConfig,
    PlanSpec,
    RequestSpec,
    Workload,
    gap_steps,
)

EOS = 2
STEP_MS = 20.0


@st.composite
def continuum_configs(draw: Any) -> EngineConfig:
    max_model_len = draw(st.sampled_from((128, 192, 256)), label="max_model_len")
    one_request = -(-max_model_len // 16)
    seats = draw(st.integers(1, 6), label="max_num_seqs")
    return EngineConfig(
        block_size=16,
        num_blocks=1 + draw(st.integers(one_request, one_request * 3 // 2), label="usable blocks"),
        max_num_seqs=seats,
        max_num_batched_tokens=draw(st.sampled_from((32, 64, 128))),
        max_model_len=max_model_len,
        long_prefill_token_threshold=draw(st.sampled_from((0, 0, 16))),
        enable_prefix_caching=draw(st.sampled_from((True, True, True, False))),
        policy="continuum",
        continuum=ContinuumConfig(
            ttl_ms=draw(st.sampled_from((10.0, 40.0, 200.0, 600.0, 1500.0, 1500.0, 2500.0))),
            estimator=draw(st.sampled_from(("fixed", "learned"))),
            threshold_ms=draw(st.sampled_from((2000.0, 2000.0, 2000.0, 30.0))),
            step_ms=STEP_MS),
    )


def _tokens(draw: Any, length: int) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(3, 200), min_size=length, max_size=length)))


@st.composite
def continuum_workloads(draw: Any) -> Workload:
    config = draw(continuum_configs())
    limit = config.max_model_len
    system = _tokens(draw, draw(st.integers(0, 64), label="system prefix"))
    requests: list[RequestSpec] = []
    plans: list[PlanSpec] = []
    for job in range(draw(st.integers(1, 5), label="jobs")):
        job_id = None if draw(st.integers(0, 7)) == 0 else f"j{job}"
        turns = draw(st.integers(1, 5), label="turns")
        length = 0  # the longest the job's history can be so far
        previous: RequestSpec | None = None
        for turn in range(turns):
            new = draw(st.integers(1, 48))
            max_tokens = draw(st.integers(1, 48))
            prompt = (system if turn == 0 else ()) + _tokens(draw, new)
            if length + len(prompt) + max_tokens > limit:
                break
            last = turn == turns - 1 or draw(st.integers(0, 9)) == 0
            rid = f"j{job}t{turn}"
            if previous is None:
                spec = RequestSpec(rid, draw(st.integers(0, 12)), prompt, max_tokens,
                                   eos_token_id=EOS, job_id=job_id, is_last_step=last)
            else:
                gap = float(draw(st.sampled_from((0, 10, 20, 45, 100, 300, 600, 1000))))
                spec = RequestSpec(rid, previous.arrival_step + 1 + gap_steps(gap, STEP_MS),
                                   prompt, max_tokens, eos_token_id=EOS, job_id=job_id,
                                   is_last_step=last, after=AfterSpec(previous.request_id, gap))
            requests.append(spec)
            if draw(st.integers(0, 3)) == 0:
                plans.append(PlanSpec(rid, eos_at=draw(st.integers(0, max_tokens - 1))))
            length += len(prompt) + max_tokens
            previous = spec
    for index in range(draw(st.integers(0, 3), label="timed requests")):
        prompt = system + _tokens(draw, draw(st.integers(1, 60)))
        requests.append(RequestSpec(f"r{index}", draw(st.integers(0, 40)), prompt,
                                    draw(st.integers(1, 16)), eos_token_id=EOS))
    aborts: list[AbortSpec] = []
    timed = [r for r in requests if r.after is None]
    if timed and draw(st.integers(0, 4)) == 0:
        victim = draw(st.sampled_from(timed))
        aborts.append(AbortSpec(victim.request_id, victim.arrival_step + draw(st.integers(0, 8))))
    requests.sort(key=lambda r: r.arrival_step)
    order = {r.request_id: i for i, r in enumerate(requests)}
    plans.sort(key=lambda p: order[p.request_id])
    return Workload("hypothesis-continuum", "generated continuum workload", config,
                    tuple(requests), tuple(aborts), tuple(plans), step_ms=STEP_MS)
