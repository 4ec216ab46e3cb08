"""Priority mix: the priority policy with urgent requests arriving into a full engine.

Low-urgency requests fill the seats and the cache first; urgent ones (lower value = served
first, as in vLLM) arrive later and must displace them. Equal priorities are common so the
tie-break on arrival order matters too.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, eos_position, rng_for, scaled
from workloads.model import EngineConfig, Workload

FAMILY = "priority-mix"
SUMMARY = "policy=priority, urgent late arrivals preempt a full engine"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=65,
        max_num_seqs=6,
        max_num_batched_tokens=512,
        max_model_len=512,
        policy="priority",
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    count = scaled(24, scale)
    step = 0
    for index in range(count):
        rid = f"pm-{index:04d}"
        # Early requests are mostly background work; later ones are mostly urgent.
        urgent = rng.random() < min(0.8, index / count + 0.1)
        priority = rng.choice((0, 0, 1)) if urgent else rng.choice((2, 3, 3))
        max_tokens = rng.randint(24, 96)
        builder.request(rid, step, [], rng.randint(32, 160), max_tokens, priority=priority)
        if rng.random() < 0.25:
            builder.plan(rid, eos_at=eos_position(rng, max_tokens))
        step += rng.randint(0, 5)
    return builder.build()
