"""A prefill/decode pair behind a router (`workloads.pd_pair`): both instances run.

Requests share a few system prompts, so the prefill instance hits its prefix cache. The
prefill instance has room for a handful of prompts; every finished prefill holds its blocks
until the decode instance has pulled them, so a decode instance slow to admit (a small pool,
long generations, seats taken) backs the prefill instance up into queueing and preemptions.
One transfer fails as a whole (an error, or a local recompute in the `-recompute` variant).
Aborts land on a request still prefilling, on one whose prefill is done and held for the
pull, and on one decoding. The push variant runs the connector in push mode: the decode side
registers its blocks and the prefill side writes them.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, KVConnectorConfig, Workload
from workloads.pd import KVTransferSpec, PDPairSpec

FAMILY = "pd-pair"
SUMMARY = ("a prefill and a decode instance behind a router: held prefills waiting for a "
           "slow decode side, one transfer failing, aborts in each phase")
PUSH_FAMILY = "pd-pair-push"
PUSH_SUMMARY = f"{FAMILY} with the connector in push mode"
RECOMPUTE_FAMILY = "pd-pair-recompute"
RECOMPUTE_SUMMARY = f"{FAMILY} with load_failure_policy 'recompute'"


def generate(seed: int, scale: float, name: str, transfer_mode: str = "pull",
             policy: str = "fail") -> Workload:
    rng = rng_for(FAMILY, seed)
    connector = KVConnectorConfig("nixl", load_failure_policy=policy,  # type: ignore[arg-type]
                                  load_latency_steps=2, send_latency_steps=1,
                                  transfer_mode=transfer_mode)  # type: ignore[arg-type]
    config = EngineConfig(block_size=16, num_blocks=28, max_num_seqs=6,
                          max_num_batched_tokens=256, max_model_len=384,
                          long_prefill_token_threshold=128, kv_connector=connector)
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    systems = [seg(f"system-{i}", rng.randint(32, 96)) for i in range(3)]
    arrivals = poisson_arrivals(rng, scaled(30, scale), rate=0.8)
    for index, arrival in enumerate(arrivals):
        rid = f"r{index:03d}"
        fails = index == 7
        builder.request(rid, arrival, [rng.choice(systems)], rng.randint(8, 120),
                        rng.randint(8, 60),
                        kv_transfer=KVTransferSpec("decode", load_fails=True) if fails else None)
    workload = builder.build()
    by_id = {r.request_id: r for r in workload.requests}
    first = by_id["r002"].arrival_step
    builder.abort("r002", first + 1)  # still prefilling (its prompt needs two chunks or more)
    builder.abort("r005", by_id["r005"].arrival_step + 3)  # its prefill is done and held
    builder.abort("r010", by_id["r010"].arrival_step + 12)  # decoding by then
    pair = PDPairSpec(router_latency_steps=1, decode_num_blocks=26, decode_max_num_seqs=4)
    return replace(builder.build(), pd_pair=pair)


def push(seed: int, scale: float, name: str) -> Workload:
    workload = generate(seed, scale, name, transfer_mode="push")
    return replace(workload, description=workload.description.replace(
        SUMMARY, PUSH_SUMMARY).replace(FAMILY, PUSH_FAMILY, 1))


def recompute(seed: int, scale: float, name: str) -> Workload:
    workload = generate(seed, scale, name, policy="recompute")
    return replace(workload, description=workload.description.replace(
        SUMMARY, RECOMPUTE_SUMMARY).replace(FAMILY, RECOMPUTE_FAMILY, 1))
