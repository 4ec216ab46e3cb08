"""Hybrid sliding window: a full-attention group beside a sliding-window group.

Prompts are long compared with the 128-token window and share documents, so prefix-cache hits
must satisfy both groups (the full group needs every block, the window group only the last
window's worth), and blocks that fall out of the window can be freed while a request runs.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, KVCacheGroup, Workload

FAMILY = "hybrid-sliding-window"
SUMMARY = "KV-cache groups full + sliding_window(128) with shared long prefixes"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=513,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        max_model_len=2048,
        kv_cache_groups=(KVCacheGroup("full"), KVCacheGroup("sliding_window", sliding_window=128)),
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    documents = [seg(f"doc-{i}", rng.randint(300, 700)) for i in range(2)]
    count = scaled(16, scale)
    for index, arrival in enumerate(poisson_arrivals(rng, count, rate=0.25)):
        roll = rng.random()
        prefix = [documents[0]] if roll < 0.4 else [documents[1]] if roll < 0.7 else []
        builder.request(
            f"hy-{index:04d}", arrival, prefix, rng.randint(32, 400), rng.randint(16, 64)
        )
    return builder.build()
