"""Structured output: requests bound by grammars beside plain ones, with speculative decoding.

Clients send JSON-schema and regex requests among plain chat. Each grammar compiles in the
background: most are ready within a step or two, a few take many steps (the request waits,
passed over by admission while the requests behind it run), and some fail to compile (the
request ends with an error once admission reaches it). The drafter does not know the grammars,
so the scheduler trims every draft at its first token the grammar rejects: narrow grammars
(digits, an enum) lose most drafts, wide ones few. A shared system prompt gives prefix hits; a
tight pool preempts decodes that the grammar bitmask then covers again on resumption.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.grammar import GrammarSpec
from workloads.model import DEFAULT_VOCAB_SIZE, EngineConfig, Workload

FAMILY = "structured-output"
SUMMARY = "grammar-bound requests: compiles that wait or fail, drafts the grammar trims"

_WIDTHS = (10, 10, 200, DEFAULT_VOCAB_SIZE // 2)
"""Accepted-token ranges: digits or an enum (most drafts trimmed), a JSON subset, half the
vocabulary (drafts often survive)."""


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(block_size=16, num_blocks=48, max_num_seqs=6,
                          max_num_batched_tokens=128, max_model_len=512,
                          long_prefill_token_threshold=64, num_spec_tokens=3)
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    count = scaled(24, scale)
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.5)):
        grammar = None
        if rng.random() < 0.7:
            width = rng.choice(_WIDTHS)
            lo = rng.randint(2, DEFAULT_VOCAB_SIZE - width)
            # Most compile within a step or two; one in five takes long; one in eight fails.
            compile_steps = rng.randint(8, 20) if rng.random() < 0.2 else rng.randint(0, 2)
            grammar = GrammarSpec(lo, lo + width, compile_steps, fails=rng.random() < 0.125)
        builder.request(f"req-{index:03d}", arrival, [seg("system", 32)], rng.randint(8, 80),
                        rng.randint(6, 40), grammar=grammar)
    return builder.build()
