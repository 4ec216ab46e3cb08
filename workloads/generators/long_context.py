"""Long context with chunked prefill: a few long documents among many short chats.

The token budget per step is small compared with the long prompts, so they are prefilled in
chunks over several steps while short requests keep arriving; `long_prefill_token_threshold`
caps how much of the budget one long prefill may take. Two long requests share a document so
a later chunked prefill starts from cached blocks.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, rng_for, scaled, seg
from workloads.model import EngineConfig, Workload

FAMILY = "long-context"
SUMMARY = "long prompts prefilled in chunks beside short ones; long_prefill_token_threshold set"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(
        block_size=16,
        num_blocks=641,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        max_model_len=4096,
        long_prefill_token_threshold=128,
        enable_chunked_prefill=True,
    )
    builder = WorkloadBuilder(
        name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}", config, token_seed=seed
    )
    document = seg("document-0", rng.randint(1200, 2000))
    count = scaled(16, scale)
    step = 0
    for index in range(count):
        rid = f"lc-{index:04d}"
        if index % 4 == 0:
            # Every other long request reads the shared document; the rest are unique.
            shared = [document] if index % 8 == 0 else []
            filler = rng.randint(600, 1500) if shared else rng.randint(1500, 3500)
            builder.request(rid, step, shared, filler, rng.randint(8, 32))
        else:
            builder.request(rid, step, [], rng.randint(16, 96), rng.randint(16, 64))
        step += rng.randint(0, 4)
    return builder.build()
