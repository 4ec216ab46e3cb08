"""Turn-2 readback (`bidirectional` NIXL, `workloads.pd`): conversations across a P/D pair seen
from one `kv_both` instance.

Each conversation's first turn arrives as a decode-side request: it pulls its prompt, decodes,
and, the connector being bidirectional, keeps its blocks when it finishes until the modelled
peer has read them back. Its next turn arrives as a prefill-side request whose prompt extends
the first turn's and which reads back the tokens the decode side kept (the first turn's
prompt and output): past the local prefix hit, and only if at least the recompute threshold
(32 tokens) is missing; a pool of about four conversations evicts enough of the earlier turns
that some pull and some recompute. One readback fails as a whole; a first turn is aborted
while decoding (nothing kept); plain requests compete for the pool.
"""

from __future__ import annotations

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, KVConnectorConfig, Workload
from workloads.pd import KVTransferSpec

FAMILY = "pd-readback"
SUMMARY = ("bidirectional NIXL: first turns decoding and keeping their blocks for a read back, "
           "second turns reading the decode side's tokens back past their local hit or "
           "recomputing them under the threshold, one readback failing")


def generate(seed: int, scale: float, name: str) -> Workload:
    rng = rng_for(FAMILY, seed)
    connector = KVConnectorConfig("nixl", bidirectional=True, recompute_threshold=32,
                                  load_latency_steps=1, send_latency_steps=2)
    config = EngineConfig(block_size=16, num_blocks=48, max_num_seqs=6,
                          max_num_batched_tokens=256, max_model_len=512,
                          long_prefill_token_threshold=128, kv_connector=connector)
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    arrivals = poisson_arrivals(rng, scaled(12, scale), rate=0.5)
    for index, arrival in enumerate(arrivals):
        first = seg(f"conversation-{index}", rng.randint(40, 160))
        answer = rng.randint(4, 24)
        builder.request(f"c{index:02d}-t1", arrival, [first], 0, answer,
                        kv_transfer=KVTransferSpec("decode"))
        if index == 3:
            builder.abort(f"c{index:02d}-t1", arrival + 2)  # decoding: nothing is kept
            continue
        kept = first.length + answer - 1  # what the decode side computed
        later = arrival + rng.randint(3, 30)
        builder.request(f"c{index:02d}-t2", later, [first], rng.randint(8, 80), 1,
                        kv_transfer=KVTransferSpec("prefill", load_fails=index == 5,
                                                   readback_tokens=kept))
        if index % 3 == 0:
            builder.request(f"plain-{index:02d}", later, [seg(f"other-{index}", 96)], 0, 12)
    return builder.build()
