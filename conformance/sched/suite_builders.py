"""Suite entries built by more than a config change: aborts planted at both ends of requests'
lives, controls between steps, a P/D pair on a hybrid model, multimodal variants, requests
own offload caps, mamba partial tails on the OffloadingConnector."""

from __future__ import annotations

from dataclasses import replace

from workloads import AbortSpec, EngineConfig, KVCacheGroup, RequestSpec, Workload, load, loads
from workloads.controls import ControlSpec
from workloads.generators import generate
from workloads.model import KVConnectorConfig
from workloads.multimodal import MultimodalConfig
from workloads.offload_limits import OffloadLimitsSpec
from workloads.repetition import RepetitionDetection
from workloads.writer import dumps

OFFLOAD_CAPS: tuple[OffloadLimitsSpec | None, ...] = (
    OffloadLimitsSpec(max_load_tokens=32), OffloadLimitsSpec(max_offload_tokens=48), None,
    OffloadLimitsSpec(0, 64), OffloadLimitsSpec(100, 100), OffloadLimitsSpec(10**6, None),
    OffloadLimitsSpec(17, 0))
"""The caps `offloading_limits` hands out in turn: inside a chunk and on one, 0, past any
prompt, one kind, both, none."""


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


def connector_resets(mode: str, name: str, steps: tuple[int, ...] | None = None) -> Workload:
    """multi-turn with a connector on a cut GPU pool (the offload suite's `mode`) and an
    operator's reset of the prefix cache and the connector's cache at `steps` (None: a third
    and two thirds of the way through the arrivals, the first while requests run, the second
    between conversations' turns). The prefix reset is refused while requests run; the
    OffloadingConnector forgets every chunk and ignores its jobs' late reports, the CPU tier
    abandons its transfers in flight and keeps its copies until they land."""
    from conformance.sched.offload_suite import with_offload

    workload = with_offload(load("multi-turn"), mode)
    last = max(r.arrival_step for r in workload.requests)
    resets = tuple(ControlSpec(step, "reset_prefix_cache", reset_connector=True)
                   for step in steps or (last // 3, 2 * last // 3))
    return replace(workload, name=name,
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


def offloading_limits(groups: tuple[KVCacheGroup, ...], name: str, blocks_per_chunk: int,
                      prompt_only: bool = True) -> Workload:
    """Four prompts (203 to 301 tokens) sent five times each, round after round, to a GPU
    pool that holds about two of them, beside an OffloadingConnector that holds them all:
    every resend finds its prefix on the CPU, not the GPU. Each request gets its own caps in
    turn (`OFFLOAD_CAPS`): loads cut short of the CPU tier's hit and to whole chunks, stores
    stopping early or never made. `prompt_only` False: every chunk stored, not the prompt's
    alone."""
    lengths = (203, 250, 277, 301)
    requests = []
    for index in range(5 * len(lengths)):
        prompt = index % len(lengths)
        start = 1000 * (prompt + 1)
        requests.append(RequestSpec(
            f"r{index}", 24 * index, tuple(range(start, start + lengths[prompt])),
            max_tokens=6, ignore_eos=True,
            offload_limits=OFFLOAD_CAPS[index % len(OFFLOAD_CAPS)]))
    connector = KVConnectorConfig(
        "offloading", num_cpu_chunks=512 // blocks_per_chunk,
        offloaded_block_size=None if blocks_per_chunk == 1 else 16 * blocks_per_chunk,
        eviction_policy="arc" if blocks_per_chunk == 1 else "lru",
        offload_prompt_only=prompt_only)
    return Workload(name, "four prompts resent round after round to a GPU pool too small to "
                    "keep them, the OffloadingConnector holding them all; per-request offload "
                    "caps", EngineConfig(block_size=16, num_blocks=48, max_num_seqs=4,
                                         max_num_batched_tokens=256, max_model_len=320,
                                         kv_cache_groups=groups, kv_connector=connector),
                    tuple(requests))


def offloading_partial_tails(groups: tuple[KVCacheGroup, ...]) -> Workload:
    """Four prompts (203 to 301 tokens, their last hash boundary inside a block) and each
    one 40 tokens longer, sent in turn for five rounds (the longer first every other round)
    to a GPU pool of three requests, hashed every 4 tokens beside an OffloadingConnector
    with chunks of one block: each prompt's partial tail is stored from its copy-on-write,
    resends load it past their whole chunks, and a longer prompt whose GPU hit ends on the
    shorter one's tail loads past it instead of copying the shared block."""
    lengths = (203, 250, 277, 301)
    requests: list[RequestSpec] = []
    for round_index in range(5):
        for prompt, length in enumerate(lengths):
            start = 1000 * (prompt + 1)
            base = tuple(range(start, start + length))
            longer = base + tuple(range(start + 500, start + 540))
            for tokens in ((base, longer) if round_index % 2 == 0 else (longer, base)):
                index = len(requests)
                requests.append(RequestSpec(f"r{index}", 12 * index, tokens, max_tokens=6,
                                            ignore_eos=True))
    connector = KVConnectorConfig("offloading", num_cpu_chunks=512, eviction_policy="arc")
    return Workload("offloading-mamba-partial-tails", "prompts and their longer versions "
                    "resent to a GPU pool too small to keep them, hashed finer than the block "
                    "beside an OffloadingConnector with chunks of one block",
                    EngineConfig(block_size=16, num_blocks=48, max_num_seqs=4,
                                 max_num_batched_tokens=256, max_model_len=368,
                                 hash_block_size=4, kv_cache_groups=groups,
                                 kv_connector=connector), tuple(requests))


REPETITION_SETTINGS: tuple[tuple[RepetitionDetection | None, int], ...] = (
    (RepetitionDetection(1, 1, 3), 0), (RepetitionDetection(4, 1, 2), 0),
    (RepetitionDetection(3, 2, 2), 0), (RepetitionDetection(1, 0, 3), 24), (None, 0),
    (RepetitionDetection(2, 0, 2), 8))
"""(detection, min_tokens) handed out in turn: one token three times, any pattern up to 4
twice, patterns of 2 or 3 only, min_tokens holding detection back, none, a pattern size 0."""


def repetition_detection() -> Workload:
    """`decode-heavy` over a 16-token vocabulary, so outputs repeat by chance, with each
    request's repetition detection from `REPETITION_SETTINGS` in turn (written and read back,
    so the prompts are the small vocabulary's)."""
    base = load("decode-heavy")
    requests = tuple(
        replace(r, repetition_detection=detection, min_tokens=min(min_tokens, r.max_tokens))
        for r, (detection, min_tokens) in zip(
            base.requests, REPETITION_SETTINGS * len(base.requests), strict=False))
    workload = replace(base, name="repetition-detection", vocab_size=16, requests=requests,
                       description=f"{base.description}; 16-token vocabulary, repetition "
                       "detection")
    return loads(dumps(workload))
