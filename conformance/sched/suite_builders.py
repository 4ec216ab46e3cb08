"""Suite entries built by more than a config change: aborts planted at both ends of requests'
lives, controls between steps, a P/D pair on a hybrid model, multimodal variants."""

from __future__ import annotations

from dataclasses import replace

from workloads import AbortSpec, KVCacheGroup, Workload, load
from workloads.controls import ControlSpec
from workloads.generators import generate
from workloads.multimodal import MultimodalConfig


def aborts_mid_prefill_decode() -> Workload:
    """long-context (128-token prefill chunks) with aborts planted at both ends of a request's
    life: every 4th request one step after it arrives (its prompt needs several chunks, so it
    is still prefilling), every 4th + 2 once its prompt is surely done (decoding)."""
    workload = load("long-context")
    aborts = []
    for index, request in enumerate(workload.requests):
        if index % 4 == 0:
            aborts.append(AbortSpec(request.request_id, request.arrival_step + 1))
        elif index % 4 == 2:
            chunks = -(-request.prompt_len // 128)
            aborts.append(AbortSpec(request.request_id, request.arrival_step + 4 * chunks + 12))
    return replace(workload, name="aborts-mid-prefill-decode",
                   description=f"{workload.description}; aborts mid-prefill and mid-decode",
                   aborts=tuple(sorted(aborts, key=lambda a: a.step)))


def pd_pair_hybrid() -> Workload:
    """pd-pair on a hybrid model (full attention + a 64-token sliding window), both pools
    doubled for the second group: each pull carries the window's tail only, and a failed
    transfer is reported by request (NIXL reports blocks only where every group is full)."""
    workload = load("pd-pair")
    assert workload.pd_pair is not None and workload.pd_pair.decode_num_blocks is not None
    return replace(
        workload, name="pd-pair-hybrid",
        description=f"{workload.description}; groups full + sliding_window(64)",
        config=replace(workload.config, num_blocks=2 * workload.config.num_blocks,
                       kv_cache_groups=(KVCacheGroup("full"),
                                        KVCacheGroup("sliding_window", sliding_window=64))),
        pd_pair=replace(workload.pd_pair,
                        decode_num_blocks=2 * workload.pd_pair.decode_num_blocks))


def offloading_resets() -> Workload:
    """multi-turn with the OffloadingConnector on a cut GPU pool (the offload suite's
    `offloading` mode) and an operator's reset of the prefix cache and the connector's cache
    a third and two thirds of the way through the arrivals: the first comes while requests
    run (the prefix reset is refused, the connector forgets every chunk and ignores its jobs'
    late reports), the second between conversations' turns."""
    from conformance.sched.offload_suite import with_offload

    workload = with_offload(load("multi-turn"), "offloading")
    last = max(r.arrival_step for r in workload.requests)
    resets = tuple(ControlSpec(step, "reset_prefix_cache", reset_connector=True)
                   for step in (last // 3, 2 * last // 3))
    return replace(workload, name="offloading-resets",
                   description=f"{workload.description}; two prefix-cache and connector resets",
                   controls=resets)


def multimodal_hits() -> Workload:
    workload = generate("multimodal", 4, 1.0)
    return replace(workload, name="multimodal-hits",
                   description=f"{workload.description}; priority policy",
                   config=replace(workload.config, policy="priority"))


def modalities_disabled() -> Workload:
    workload = generate("multimodal", 0, 1.0)
    return replace(workload, name="multimodal-modalities-disabled",
                   description=f"{workload.description}; every modality disabled, text only",
                   requests=tuple(replace(r, mm_items=()) for r in workload.requests),
                   config=replace(workload.config, multimodal=MultimodalConfig(120, 200, False, 0)))
