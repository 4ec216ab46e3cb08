"""Speculative decoding: k draft tokens per step with planned acceptance.

Each request gets an acceptance profile (poor, mixed or good drafts) and a plan that says how
many of the k drafts the verifier accepts at every decode step, so the twin and vLLM see the
same variable number of tokens per step, the same lookahead block allocation and the same
rejected-draft cleanup. Some requests also end early on EOS.
"""

from __future__ import annotations

import random

from workloads.generators.common import WorkloadBuilder, eos_position, rng_for, scaled, seg
from workloads.model import EngineConfig, Workload

FAMILY = "spec-decode"
SUMMARY = "num_spec_tokens=3 with per-step acceptance plans (poor/mixed/good drafts)"
NUM_SPEC_TOKENS = 3


def acceptance_plan(rng: random.Random, max_tokens: int, p_accept: float, k: int) -> list[int]:
    """Accepted drafts per decode step until `max_tokens` outputs are certainly produced.

    A step accepts the longest run of drafts each accepted with probability `p_accept`, as a
    verifier does, and then emits one bonus/corrected token, so a step yields accepted + 1.
    """
    plan: list[int] = []
    produced = 0
    while produced < max_tokens:
        accepted = 0
        while accepted < k and rng.random() < p_accept:
            accepted += 1
        plan.append(accepted)
        produced += accepted + 1
    return plan


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=257,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=512,
        num_spec_tokens=NUM_SPEC_TOKENS,
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    shared = seg("spec-system", 40)
    count = scaled(16, scale)
    step = 0
    for index in range(count):
        rid = f"sd-{index:04d}"
        max_tokens = rng.randint(32, 128)
        prefix = [shared] if rng.random() < 0.5 else []
        builder.request(rid, step, prefix, rng.randint(16, 128), max_tokens)
        p_accept = rng.choice((0.2, 0.6, 0.9))
        eos_at = eos_position(rng, max_tokens) if rng.random() < 0.3 else None
        plan = acceptance_plan(rng, max_tokens, p_accept, NUM_SPEC_TOKENS)
        builder.plan(rid, eos_at=eos_at, spec_acceptance=tuple(plan))
        step += rng.randint(0, 6)
    return builder.build()
