"""Bursty arrivals: quiet periods broken by bursts that land on a single step.

A burst admits more requests in one step than there are seats or tokens in the budget, so the
waiting queue, the token budget split and admission order are stressed at once; some clients
give up and abort shortly after arriving. Runs with async scheduling on, whose one-step
lookahead changes when finished requests free their seats.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, rng_for, scaled, seg
from workloads.model import EngineConfig, Workload

FAMILY = "bursty"
SUMMARY = "on/off bursts of arrivals on one step, early aborts, async scheduling"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=257,
        max_num_seqs=12,
        max_num_batched_tokens=768,
        max_model_len=1024,
        async_scheduling=True,
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    template = seg("burst-template", 64)
    count = scaled(32, scale)
    step = 0
    index = 0
    while index < count:
        for _ in range(min(count - index, rng.randint(4, 12))):
            rid = f"bu-{index:04d}"
            prefix = [template] if rng.random() < 0.5 else []
            builder.request(rid, step, prefix, rng.randint(16, 192), rng.randint(8, 48))
            if rng.random() < 0.1:
                builder.abort(rid, step + rng.randint(0, 10))
            index += 1
        step += rng.randint(20, 50)
    return builder.build()
