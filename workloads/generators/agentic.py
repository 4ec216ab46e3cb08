"""Closed-loop agent jobs for the continuum policy (seed 002): turns separated by tool calls.

A job is a chain of turns. Its first turn is a system prompt shared by many jobs plus the
task; each later turn arrives `after` the previous one finishes, a tool call's gap later, and
adds the tool's result to the whole history (the driver prepends the previous prompt and the
tokens the previous turn really produced). Every turn but the last has `is_last_step` false,
so the continuum policy may pin its KV blocks for the next turn.

Gaps are drawn from a two-mode distribution: most tool calls are quick (0.2-1.6 s, where a pin
pays), one in five is slow (2.5-6 s, past the 2 s threshold: the fixed estimator pins anyway
and loses the blocks to expiry, the learned one stops pinning after seeing it). The pool holds
about three jobs' histories, so pins compete with running turns and preemption has to choose
between pinned and unpinned jobs. Outputs are fixed by EOS plans, as in `sessions`.
"""

from __future__ import annotations

import random

from workloads.generators.common import WorkloadBuilder, rng_for, scaled, seg
from workloads.model import (
    AfterSpec,
    ContinuumConfig,
    EngineConfig,
    Segment,
    Workload,
    gap_steps,
)

FAMILY = "agentic"
SUMMARY = "agent jobs: turns after tool-call gaps, shared system prompts, continuum policy"
STEP_MS = 20.0


def tool_call_ms(rng: random.Random) -> float:
    """A tool call's time: quick most of the time, sometimes past the pin threshold."""
    if rng.random() < 0.2:
        return float(rng.randrange(2500, 6000, 100))
    return float(rng.randrange(200, 1600, 20))


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=321,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=3072,
        policy="continuum",
        continuum=ContinuumConfig(ttl_ms=1500.0, estimator="fixed", threshold_ms=2000.0,
                                  step_ms=STEP_MS),
    )
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, seed, step_ms=STEP_MS)
    systems = [seg(f"agent-system-{i}", rng.randint(256, 512)) for i in range(3)]
    for index in range(scaled(6, scale)):
        _job(builder, rng, f"job{index:03d}", rng.randint(0, 40), rng.choice(systems))
    return builder.build()


def _job(builder: WorkloadBuilder, rng: random.Random, job: str, start: int,
         system: Segment) -> None:
    turns = rng.randint(3, 6)
    limit = builder.config.max_model_len
    history = system.length
    previous: tuple[str, int] | None = None  # (request id, earliest arrival step)
    for turn in range(turns):
        new = rng.randint(32, 96) if turn == 0 else rng.randint(32, 256)
        produced = rng.randint(16, 48)
        max_tokens = produced + rng.randint(0, 16)
        last = turn == turns - 1 or history + new + max_tokens + 256 + 64 > limit
        rid = f"{job}-t{turn}"
        if previous is None:
            builder.request(rid, start, [system], new, max_tokens, job_id=job,
                            is_last_step=last)
            arrival = start
        else:
            gap = tool_call_ms(rng)
            arrival = previous[1] + 1 + gap_steps(gap, STEP_MS)
            builder.request(rid, arrival, [], new, max_tokens, job_id=job, is_last_step=last,
                            after=AfterSpec(previous[0], gap))
        builder.plan(rid, eos_at=produced - 1)
        history += new + max_tokens
        previous = (rid, arrival)
        if last:
            return
