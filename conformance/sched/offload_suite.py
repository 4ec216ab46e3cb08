"""The default suite with a KV connector on (issue 11's gate): every suite workload with
upstream's SimpleCPUOffloadConnector, eager or lazy (lazy on its disk backend, so the tier's
events say STORAGE and its hits count as disk), or with its OffloadingConnector
(`offloading`: LRU, chunks of two GPU blocks; `offloading-arc`: ARC, one block per chunk,
self-describing KV events, and a sync-load budget of `SYNC_LOAD_BUDGET_BYTES`, so under 0.33
small hits load within their step and larger ones asynchronously), on
a GPU pool cut to an eighth (never below what its longest request needs) so prefixes leave
the GPU and come back from the CPU. Mode `pd` puts the NIXL prefill/decode connector on
instead (`workloads.pd`): of the requests that may take a part, every third pulls its prompt
from a modelled prefill peer (the second of those pulls fails as a whole) and every third is
a prefill whose blocks wait for the peer's read. Mode `pd-push` does the same with the
connector in push mode (decode requests register their blocks, the peer writes them), and
`pd-offloading` under a MultiConnector: the NIXL connector asked first, the OffloadingConnector
(a CPU tier twice the original GPU pool) beside it.

The CPU pool is twice the original GPU pool: big enough to hold everything the GPU ever
caches. With a smaller one lazy offload never idles (every step re-copies blocks the CPU LRU
just evicted; `conformance/upstream_bugs/lazy-offload-never-idles.jsonl` pins that), which the
liveness check reports as a stall on both sides, agreement but not a useful gate.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.model import KVConnectorConfig, RequestSpec, Workload
from workloads.pd import KVTransferSpec

OFFLOAD_MODES: tuple[str, ...] = ("eager", "lazy", "offloading", "offloading-arc", "pd",
                                  "pd-push", "pd-offloading")

SYNC_LOAD_BUDGET_BYTES = 65_536
"""The `offloading-arc` mode's `sync_load_budget_bytes`: 128 tokens a step with one attention
group (the harness's model takes 512 bytes per token per group), about 40 with three. Not
beside a mamba group: there 0.33 can overdraw its pool and die
(`conformance/upstream_bugs/offloading-sync-load-mamba-undercount-0.33.jsonl`), which would end
those runs early instead of gating them to the end."""

NOT_OFFLOADED: dict[str, str] = {
    "hybrid-mamba-none": "mamba 'none' with prefix caching: 0.33 refuses it (the suite entry "
                         "checks both refuse alike); beside the NIXL connector it is exact "
                         "against 0.32.0 (by hand), and the CPU tier and the OffloadingConnector "
                         "beside it are not modelled",
    "offload-sessions": "offloads already (its own CPU tier and pool sizes)",
    "offload-sessions-lazy": "offloads already (its own CPU tier and pool sizes)",
    "streaming-sessions": "sessions waiting for input keep their KV blocks: on a pool cut to an "
                          "eighth the ordinary requests never get in (both sides stall alike)",
    "pooling": "a pooling model with a connector is not modelled (the workload format refuses "
               "it)",
    "operator-controls": "its forced prefix-cache reset comes while a request loads from the "
                         "CPU tier, which upstream refuses by raising (and the twin alike)",
    "pd-disaggregation": "runs the NIXL P/D connector already (one connector per engine)",
    "offloading-resets": "runs the OffloadingConnector already",
    "offload-resets": "runs the CPU offload tier already",
    "offloading-limits": "runs the OffloadingConnector already (its requests' caps are "
                         "read by it alone)",
    "offloading-limits-mamba": "runs the OffloadingConnector already (its requests' caps are "
                               "read by it alone)",
    "offloading-mamba-partial-tails": "runs the OffloadingConnector already (its partial "
                                      "tails are its own)",
    "multimodal-iteration-details": "a logging option over `multimodal`, which runs with "
                                    "every connector already",
    "spec-decode-request-metrics": "a metrics option over `spec-decode`, which runs with every "
                                   "connector already",
    "structured-output-request-metrics": "a metrics option over `structured-output-async`, "
                                         "which runs with every connector already",
    "pd-disaggregation-recompute": "runs the NIXL P/D connector already",
    "pd-disaggregation-push": "runs the NIXL P/D connector already",
    "pd-readback": "runs the NIXL P/D connector already",
    "pd-offloading": "runs the NIXL connector and the OffloadingConnector already",
    "pd-offloading-cpu-first": "runs the NIXL connector and the OffloadingConnector already",
    "pd-pair": "a P/D pair runs the NIXL connector already, on both instances",
    "pd-pair-push": "a P/D pair runs the NIXL connector already, on both instances",
    "pd-pair-hybrid": "a P/D pair runs the NIXL connector already, on both instances",
    "multimodal-modalities-disabled": "the multimodal workload without its items: "
                                      "`multimodal` runs with every connector already",
    "multimodal-unsplittable-item": "both systems refuse the config at start-up: nothing runs "
                                    "to offload",
    "encoder-decoder": "upstream supports no KV connector for encoder-decoder models (it "
                       "asserts; the workload format refuses one)",
    "encoder-decoder-window": "upstream supports no KV connector for encoder-decoder models",
    "hybrid-circular-buffer": "a circular buffer with a connector is not modelled (the "
                              "workload format refuses it)",
    "hybrid-bounded-replay": "bounded replay with a connector is not modelled (a load that "
                             "carries the window replays nothing; the workload format refuses "
                             "it)",
}
"""Suite workloads left out of the offload suite, with why."""


NOT_IN_PD: dict[str, str] = {
    "dcp-multi-turn": "upstream refuses P/D with decode context parallelism for models other "
                      "than MLA ones (the workload format refuses it)",
    "dcp-hybrid-mamba": "upstream refuses P/D with decode context parallelism for models other "
                        "than MLA ones",
    "hybrid-reference-window": "its failing pull crashes upstream (a block-level failure report "
                               "on two KV-cache groups; conformance/upstream_bugs/"
                               "pd-failed-pull-two-groups.jsonl): both stop alike mid-run",
    "continuum-agent": "the continuum policy is not upstream's (its fork has no NIXL runs)",
}
"""Suite workloads left out of mode `pd` only, with why."""


ONLY_IN_MODES: dict[str, tuple[tuple[str, ...], str]] = {
    "dcp-eagle-preemption-storm": (("eager", "lazy", "offloading-arc"),
                                   "under DCP 4 a scheduler block is 64 tokens: its prompts "
                                   "fill no chunk of two blocks, so the `offloading` mode "
                                   "would store nothing (exact, by hand); P/D with DCP is "
                                   "refused upstream"),
    "mamba-spec-decode": (("eager", "lazy", "pd", "pd-push"),
                          "the OffloadingConnector beside a mamba group not in 'align' mode is "
                          "not modelled by the twin (it refuses the config)"),
}
"""Suite workloads that run in some modes only: (those modes, why not the others)."""


def left_out(name: str, mode: str) -> str | None:
    """Why suite workload `name` is left out of the offload suite in `mode` (None: it runs)."""
    if name in NOT_OFFLOADED:
        return NOT_OFFLOADED[name]
    if name in ONLY_IN_MODES and mode not in ONLY_IN_MODES[name][0]:
        return ONLY_IN_MODES[name][1]
    return NOT_IN_PD.get(name) if mode.startswith("pd") else None


def with_pd_roles(workload: Workload) -> tuple[RequestSpec, ...]:
    """The workload's requests with P/D parts (see the module docstring)."""
    requests: list[RequestSpec] = []
    decodes = 0
    candidates = 0
    for request in workload.requests:
        if request.after is not None or request.stream_end_step is not None or \
                request.mm_items:
            requests.append(request)
            continue
        role = candidates % 3
        candidates += 1
        if role == 0:
            decodes += 1
            request = replace(request, kv_transfer=KVTransferSpec("decode", decodes == 2))
        elif role == 1:
            request = replace(request, kv_transfer=KVTransferSpec("prefill"))
        requests.append(request)
    return tuple(requests)


def with_offload(workload: Workload, mode: str, latency_steps: int = 1,
                 gpu_share: int = 8) -> Workload:
    """`workload` with the CPU tier on in `mode` (eager | lazy), its GPU pool cut to
    1/`gpu_share` (never below what its longest request needs, plus two blocks)."""
    if mode not in OFFLOAD_MODES:
        raise ValueError(f"offload mode: one of {', '.join(OFFLOAD_MODES)} (got {mode!r})")
    config = workload.config
    block = config.block_size
    # max_model_len shrinks to the longest request (plus a step of drafts), rounded up to a
    # block, so the cut pool still holds one full-length request as workload files require.
    longest = max((r.prompt_len + r.max_tokens for r in workload.requests), default=1)
    slack = 1 + config.num_spec_tokens + config.num_lookahead_tokens
    max_model_len = min(config.max_model_len, -(-(longest + slack) // block) * block)
    need = -(-max_model_len // block) * len(config.kv_cache_groups) + 1
    requests = workload.requests
    nixl = KVConnectorConfig("nixl", load_latency_steps=latency_steps,
                             send_latency_steps=latency_steps,
                             transfer_mode="push" if mode == "pd-push" else "pull")
    connector = (
        KVConnectorConfig("multi", connectors=(nixl, KVConnectorConfig(
            "offloading", load_latency_steps=latency_steps, store_latency_steps=latency_steps,
            num_cpu_chunks=2 * config.num_blocks)))
        if mode == "pd-offloading"
        else nixl if mode.startswith("pd")
        else KVConnectorConfig("offloading", load_latency_steps=latency_steps,
                          store_latency_steps=latency_steps,
                          num_cpu_chunks=config.num_blocks if mode == "offloading"
                          else 2 * config.num_blocks,
                          offloaded_block_size=2 * block if mode == "offloading" else None,
                          eviction_policy="arc" if mode == "offloading-arc" else "lru",
                          # The ARC mode also describes its chunks in its KV events.
                          self_describing_kv_events=mode == "offloading-arc",
                          sync_load_budget_bytes=(
                              SYNC_LOAD_BUDGET_BYTES if mode == "offloading-arc"
                              and all(g.type != "mamba" for g in config.kv_cache_groups)
                              else 0))
        if mode.startswith("offloading")
        else KVConnectorConfig(num_cpu_blocks=2 * config.num_blocks, lazy_offload=mode == "lazy",
                               load_latency_steps=latency_steps,
                               store_latency_steps=latency_steps,
                               backend="disk" if mode == "lazy" else "cpu"))
    if mode.startswith("pd"):
        requests = with_pd_roles(workload)
    return replace(workload, name=f"{workload.name}+offload-{mode}", requests=requests,
                   description=f"{workload.description}; CPU offload ({mode}), GPU pool / "
                               f"{gpu_share}",
                   config=replace(config, kv_connector=connector, max_model_len=max_model_len,
                                  num_blocks=max(need + 1, config.num_blocks // gpu_share)))
