"""Preemption storm: far more KV demand than a tiny cache holds.

Many requests arrive within a few steps and keep growing while the pool has only a few dozen
blocks, so the scheduler must preempt (recompute) again and again. Half the requests share a
prefix, so a preempted request can find some of its blocks still cached when it resumes. A few
requests are aborted while they may be waiting or preempted.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, rng_for, scaled, seg
from workloads.model import EngineConfig, Workload

FAMILY = "preemption-storm"
SUMMARY = "tiny KV cache (40 usable blocks), bursts of growing requests, aborts"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=41,
        max_num_seqs=16,
        max_num_batched_tokens=512,
        max_model_len=512,
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    prefix = seg("storm-prefix", 48)
    count = scaled(20, scale)
    for index in range(count):
        rid = f"st-{index:04d}"
        arrival = rng.randint(0, 8)
        shared = [prefix] if index % 2 == 0 else []
        builder.request(rid, arrival, shared, rng.randint(24, 80), rng.randint(32, 96))
        if rng.random() < 0.12:
            builder.abort(rid, arrival + rng.randint(5, 60))
    return builder.build()
