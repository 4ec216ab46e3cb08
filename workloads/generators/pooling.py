"""A pooling (embedding) model: prefill-only requests that finish with pooled output.

A retrieval service embeds documents and queries. Documents are long (some fill the whole
context: a pooling model samples no token after the prompt, so nothing is held back for one)
and share boilerplate headers, so prefix hits are common; queries are short and arrive in
bursts. Every request finishes the step its prompt is computed, with no token. A small step
budget chunks the long documents and a tight pool preempts them mid-prefill.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, Workload

FAMILY = "pooling"
SUMMARY = "prefill-only embedding requests: whole-context documents, shared headers, bursts"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(block_size=16, num_blocks=20, max_num_seqs=8,
                          max_num_batched_tokens=96, max_model_len=256,
                          long_prefill_token_threshold=64, runner="pooling")
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    headers = [seg(f"header-{i}", rng.choice((16, 40, 64))) for i in range(3)]
    for index, arrival in enumerate(poisson_arrivals(rng, scaled(16, scale), rate=0.4)):
        header = rng.choice(headers)
        # One document in four fills the context exactly.
        length = 256 if rng.random() < 0.25 else rng.randint(header.length + 1, 240)
        builder.request(f"doc-{index:03d}", arrival, [header], length - header.length, 1)
    for index, arrival in enumerate(poisson_arrivals(rng, scaled(24, scale), rate=1.5)):
        builder.request(f"query-{index:03d}", arrival, [], rng.randint(4, 30), 1)
    return builder.build()
