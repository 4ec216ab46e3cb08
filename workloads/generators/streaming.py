"""Streaming-input sessions beside ordinary requests, in a small engine.

Live sessions (speech, a transcript) send their input in parts: each part is a turn that
computes the new tokens after everything the session kept and generates a short answer; in
between, the session waits for its next part with its KV blocks and its seat. Some parts
arrive while the turn before is still running (queued), most after a pause; one session is
closed while its last turn runs, the others while they wait. Ordinary requests compete for the
seats the waiting sessions keep and for the KV blocks they hold; a tight pool adds preemptions.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import DEFAULT_VOCAB_SIZE, EngineConfig, Workload
from workloads.prompts import TokenSource
from workloads.streaming import StreamChunk

FAMILY = "streaming-sessions"
SUMMARY = "resumable sessions fed in parts beside ordinary requests, seats held while waiting"


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    config = EngineConfig(block_size=16, num_blocks=41, max_num_seqs=6,
                          max_num_batched_tokens=96, max_model_len=512,
                          long_prefill_token_threshold=48)
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    tokens = TokenSource(DEFAULT_VOCAB_SIZE, seed)
    sessions = scaled(4, scale)
    for index in range(sessions):
        start = rng.randint(0, 6)
        step = start
        chunks = []
        for part in range(rng.randint(2, 4)):
            # Most parts come after the turn before has ended; some while it still runs.
            step += rng.randint(2, 5) if rng.random() < 0.3 else rng.randint(12, 30)
            new = tokens.stream("part", f"session-{index}-{part}", rng.randint(4, 40))
            chunks.append(StreamChunk(step, new, rng.randint(2, 10)))
        # The first session closes while its last turn may still run; the others after.
        end = step + (1 if index == 0 else rng.randint(20, 40))
        builder.request(f"session-{index}", start, [seg("system", 24)], rng.randint(8, 40),
                        rng.randint(3, 10), stream=tuple(chunks), stream_end_step=end)
    for index, arrival in enumerate(poisson_arrivals(rng, scaled(14, scale), rate=0.25)):
        builder.request(f"req-{index:03d}", arrival, [seg("system", 24)], rng.randint(10, 90),
                        rng.randint(4, 30))
    return builder.build()
