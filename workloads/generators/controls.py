"""Operator controls: the prefix cache reset and the scheduler paused while requests run.

Two waves of requests share system prompts. While the first wave runs, an operator resets
the prefix cache (refused: blocks are in use), pauses admissions (running requests go on,
arrivals queue up), pauses everything (nothing is scheduled; the engine idles), then resumes;
later a reset with `preempt_running` sends every running request back to the queue and
succeeds. Between the waves, with nothing running, a plain reset succeeds, so the second wave
finds none of the first wave's prefixes, which a twin that ignores the reset would hit.
"""

from __future__ import annotations

from workloads.controls import ControlSpec
from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, Workload

FAMILY = "operator-controls"
SUMMARY = "prefix-cache resets (refused, forced, idle) and pauses of new or all requests"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(block_size=16, num_blocks=161, max_num_seqs=8,
                          max_num_batched_tokens=256, max_model_len=512,
                          long_prefill_token_threshold=64)
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    systems = [seg(f"system-{i}", rng.randint(40, 120)) for i in range(2)]
    count = scaled(12, scale)
    last = 0
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.8)):
        builder.request(f"w1-{index:03d}", arrival, [rng.choice(systems)], rng.randint(4, 40),
                        rng.randint(8, 30))
        last = max(last, arrival)
    for step, action, mode in ((2, "reset_prefix_cache", None), (4, "pause", "new"),
                               (9, "pause", "all"), (13, "unpause", None)):
        builder.control(ControlSpec(step, action, mode=mode))  # type: ignore[arg-type]
    builder.control(ControlSpec(last + 6, "reset_prefix_cache", preempt_running=True))
    # The first wave is done long before this (at most ~30 outputs each, a few in parallel).
    second = last + 6 + 120
    builder.control(ControlSpec(second - 1, "reset_prefix_cache"))
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.8, start=second)):
        builder.request(f"w2-{index:03d}", arrival, [rng.choice(systems)], rng.randint(4, 40),
                        rng.randint(8, 30))
    return builder.build()
