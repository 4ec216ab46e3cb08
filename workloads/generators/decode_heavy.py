"""Decode-heavy: short prompts, long outputs, more requests than `max_num_seqs`.

Most steps are pure decode, so this exercises the running-queue path, request admission as
slots free up, EOS and stop handling (`eos_at` plans, some with `min_tokens` that suppress an
early EOS) and the steady growth of per-request block tables.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, eos_position, rng_for, scaled
from workloads.model import EngineConfig, Workload

FAMILY = "decode-heavy"
SUMMARY = "short prompts, long outputs, EOS plans and min_tokens; more requests than seats"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=257,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=512,
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    count = scaled(20, scale)
    step = 0
    for index in range(count):
        rid = f"dh-{index:04d}"
        max_tokens = rng.randint(48, 128)
        min_tokens = rng.randint(8, 32) if rng.random() < 0.2 else 0
        stops = (13,) if rng.random() < 0.15 else ()
        builder.request(
            rid,
            step,
            [],
            rng.randint(8, 96),
            max_tokens,
            min_tokens=min_tokens,
            stop_token_ids=stops,
        )
        if rng.random() < 0.4:
            builder.plan(rid, eos_at=eos_position(rng, max_tokens, low=0.1))
        # The first wave arrives together; the rest trickle in.
        if index >= 6:
            step += rng.randint(1, 6)
    return builder.build()
