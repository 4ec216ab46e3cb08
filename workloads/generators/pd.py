"""Prefill/decode disaggregation seen from one `kv_both` instance (`workloads.pd`).

Requests share a few system prompts. A third of them arrive as decode-side requests whose
prompt a (modelled) prefill peer computed: they pull it, past whatever their local prefix hit
covers, and wait for the pull; one pull fails as a whole (the request ends with an error, or
recomputes in the `pd-disaggregation-recompute` variant). A third are prefill-side requests: a
router caps most at one token, and every finished one keeps its blocks until the decode peer
has read them, so held prefills crowd a pool sized for a handful of requests and push running
requests out. The rest are ordinary. Aborts land on a decode request still queued (its peer
must still be told to free its blocks), on one whose pull is in flight (its blocks stay until
the pull lands), and on a prefill mid-prompt (no read follows). An operator's reset of the
prefix cache and the connector's cache comes while requests run.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.controls import ControlSpec
from workloads.generators.common import WorkloadBuilder, poisson_arrivals, rng_for, scaled, seg
from workloads.model import EngineConfig, KVConnectorConfig, Workload
from workloads.pd import KVTransferSpec

FAMILY = "pd-disaggregation"
SUMMARY = ("the NIXL P/D connector on one instance: decode requests pulling their prompt "
           "(one pull failing), prefills held for the peer's read, aborts around pulls")
RECOMPUTE_FAMILY = "pd-disaggregation-recompute"
RECOMPUTE_SUMMARY = f"{FAMILY} with load_failure_policy 'recompute' (a failed pull recomputes)"
OFFLOADING_FAMILY = "pd-offloading"
OFFLOADING_SUMMARY = (f"{FAMILY} under a MultiConnector with the OffloadingConnector (NIXL "
                      "asked first, a CPU tier beside it)")
CPU_FIRST_FAMILY = "pd-offloading-cpu-first"
CPU_FIRST_SUMMARY = (f"{FAMILY} under a MultiConnector, the OffloadingConnector asked first (a "
                     "decode request with CPU hits loads them and pulls nothing)")
PUSH_FAMILY = "pd-disaggregation-push"
PUSH_SUMMARY = (f"{FAMILY} with the connector in push mode (decode requests register their "
                "blocks, the peer writes them)")


def generate(seed: int, scale: float, name: str, policy: str = "fail",
             transfer_mode: str = "pull") -> Workload:
    rng = rng_for(FAMILY, seed)
    connector = KVConnectorConfig("nixl", load_failure_policy=policy,  # type: ignore[arg-type]
                                  load_latency_steps=2, send_latency_steps=3,
                                  transfer_mode=transfer_mode)  # type: ignore[arg-type]
    config = EngineConfig(block_size=16, num_blocks=30, max_num_seqs=6,
                          max_num_batched_tokens=192, max_model_len=384,
                          long_prefill_token_threshold=96, kv_connector=connector)
    builder = WorkloadBuilder(name, f"{FAMILY} (seed {seed}, scale {scale:g}): {SUMMARY}",
                              config, token_seed=seed)
    systems = [seg(f"system-{i}", rng.randint(32, 96)) for i in range(3)]
    decodes = prefills = 0
    for index, arrival in enumerate(poisson_arrivals(rng, scaled(30, scale), rate=1.2)):
        rid = f"r{index:03d}"
        role = index % 3
        transfer = None
        max_tokens = rng.randint(4, 40)
        if role == 0:
            decodes += 1
            transfer = KVTransferSpec("decode", load_fails=decodes == 3)
        elif role == 1:
            prefills += 1
            transfer = KVTransferSpec("prefill")
            if prefills % 4:
                max_tokens = 1  # as a router sends a prefill
        builder.request(rid, arrival, [rng.choice(systems)], rng.randint(8, 120), max_tokens,
                        kv_transfer=transfer)
        if role == 0 and decodes == 2:
            builder.abort(rid, arrival + 1)  # still queued behind the burst below
        if role == 1 and prefills == 2:
            builder.abort(rid, arrival + 1)  # mid-prompt: no read follows
    workload = builder.build()
    # A burst of decode requests at the start fills the seats; one of them is aborted while
    # its pull is in flight.
    first = workload.requests[0].arrival_step
    builder.request("long-decode", first, [seg("long", 300)], 1, 8,
                    kv_transfer=KVTransferSpec("decode"))
    builder.request("pulling-decode", first, [systems[0]], 60, 8,
                    kv_transfer=KVTransferSpec("decode"))
    builder.abort("pulling-decode", first + 1)
    # An operator resets the prefix cache and the connector's (refused while blocks are in
    # use; the connector keeps no cache of its own, so its part succeeds).
    builder.control(ControlSpec(first + 12, "reset_prefix_cache", reset_connector=True))
    return builder.build()


def recompute(seed: int, scale: float, name: str) -> Workload:
    workload = generate(seed, scale, name, policy="recompute")
    return replace(workload, description=workload.description.replace(
        SUMMARY, RECOMPUTE_SUMMARY).replace(FAMILY, RECOMPUTE_FAMILY, 1))


def push(seed: int, scale: float, name: str) -> Workload:
    workload = generate(seed, scale, name, transfer_mode="push")
    return replace(workload, description=workload.description.replace(
        SUMMARY, PUSH_SUMMARY).replace(FAMILY, PUSH_FAMILY, 1))


def with_cpu_tier(workload: Workload, family: str, summary: str,
                  cpu_first: bool) -> Workload:
    """`workload` under a MultiConnector: its NIXL connector and an OffloadingConnector with a
    CPU tier twice its GPU pool, the CPU tier asked first or second."""
    nixl = workload.config.kv_connector
    assert nixl is not None
    cpu = KVConnectorConfig("offloading", num_cpu_chunks=2 * workload.config.num_blocks)
    multi = KVConnectorConfig("multi", connectors=(cpu, nixl) if cpu_first else (nixl, cpu))
    return replace(workload, config=replace(workload.config, kv_connector=multi),
                   description=workload.description.replace(SUMMARY, summary).replace(
                       FAMILY, family, 1))


def offloading(seed: int, scale: float, name: str) -> Workload:
    return with_cpu_tier(generate(seed, scale, name), OFFLOADING_FAMILY, OFFLOADING_SUMMARY,
                         cpu_first=False)


def offloading_cpu_first(seed: int, scale: float, name: str) -> Workload:
    return with_cpu_tier(generate(seed, scale, name), CPU_FIRST_FAMILY, CPU_FIRST_SUMMARY,
                         cpu_first=True)
