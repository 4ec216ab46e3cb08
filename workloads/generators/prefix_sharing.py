"""Prefix sharing: system prompts and few-shot examples reused across requests.

Requests start with one of a few system prompts (popularity is skewed), then zero to three
few-shot examples in a per-task fixed order, then a unique question. Lengths are deliberately
not multiples of the block size, so partial-block boundaries matter. One tenant sets a
`cache_salt`, which must keep its blocks apart from everyone else's even for equal prompts.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, Segment, Workload

FAMILY = "prefix-sharing"
SUMMARY = "shared system prompts and few-shot examples, one salted tenant"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=385,
        max_num_seqs=16,
        max_num_batched_tokens=1024,
        max_model_len=1024,
        hash_algo="sha256_cbor",
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    systems = [seg(f"system-{i}", rng.randint(96, 260)) for i in range(3)]
    shots = [seg(f"shot-{i}", rng.randint(40, 120)) for i in range(4)]
    # A task fixes which examples follow the system prompt, and in which order.
    tasks: list[list[Segment]] = [rng.sample(shots, k) for k in (0, 1, 2, 3)]
    count = scaled(28, scale)
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.6)):
        system = systems[min(2, int(rng.expovariate(1.2)))]
        task = rng.choice(tasks)
        salt = "tenant-b" if rng.random() < 0.2 else None
        builder.request(
            f"ps-{index:04d}",
            arrival,
            [system, *task],
            rng.randint(8, 64),
            rng.randint(8, 40),
            cache_salt=salt,
        )
    return builder.build()
