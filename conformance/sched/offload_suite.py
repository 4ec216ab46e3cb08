"""The default suite with the CPU offload tier on (issue 11's gate): every suite workload with
upstream's SimpleCPUOffloadConnector, eager or lazy, or with its OffloadingConnector
(`offloading`: LRU, chunks of two GPU blocks; `offloading-arc`: ARC, one block per chunk), on
a GPU pool cut to an eighth (never below what its longest request needs) so prefixes leave
the GPU and come back from the CPU.

The CPU pool is twice the original GPU pool: big enough to hold everything the GPU ever
caches. With a smaller one lazy offload never idles (every step re-copies blocks the CPU LRU
just evicted; `conformance/upstream_bugs/lazy-offload-never-idles.jsonl` pins that), which the
liveness check reports as a stall on both sides, agreement but not a useful gate.
"""

from __future__ import annotations

from dataclasses import replace

from workloads.model import KVConnectorConfig, Workload

OFFLOAD_MODES: tuple[str, ...] = ("eager", "lazy", "offloading", "offloading-arc")

NOT_OFFLOADED: dict[str, str] = {
    "hybrid-mamba": "mamba 'align' boundary-state hand-offs to the CPU tier are not modelled "
                    "by the twin (it refuses the config)",
    "hybrid-mamba-none": "mamba groups with a connector are not modelled by the twin",
    "offload-sessions": "offloads already (its own CPU tier and pool sizes)",
    "offload-sessions-lazy": "offloads already (its own CPU tier and pool sizes)",
    "streaming-sessions": "sessions waiting for input keep their KV blocks: on a pool cut to an "
                          "eighth the ordinary requests never get in (both sides stall alike)",
    "pooling": "a pooling model with a connector is not modelled (the workload format refuses "
               "it)",
    "operator-controls": "its forced prefix-cache reset comes while a request loads from the "
                         "CPU tier, which upstream refuses by raising (and the twin alike)",
}
"""Suite workloads left out of the offload suite, with why."""

NOT_OFFLOADED_BY_OFFLOADING: dict[str, str] = {
    "hybrid-sliding-window": "the twin's OffloadingConnector has full-attention groups only "
                             "(windowed lookups and sparse stores are not twinned)",
    "hybrid-chunked-local": "the twin's OffloadingConnector has full-attention groups only",
    "hybrid-reference-window": "the twin's OffloadingConnector has full-attention groups only",
}
"""Suite workloads left out with the OffloadingConnector's modes only, with why."""


def left_out(name: str, mode: str) -> str | None:
    """Why suite workload `name` is left out of the offload suite in `mode` (None: it runs)."""
    if name in NOT_OFFLOADED:
        return NOT_OFFLOADED[name]
    return NOT_OFFLOADED_BY_OFFLOADING.get(name) if mode.startswith("offloading") else None


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
    connector = (
        KVConnectorConfig("offloading", load_latency_steps=latency_steps,
                          store_latency_steps=latency_steps,
                          num_cpu_chunks=config.num_blocks if mode == "offloading"
                          else 2 * config.num_blocks,
                          offloaded_block_size=2 * block if mode == "offloading" else None,
                          eviction_policy="arc" if mode == "offloading-arc" else "lru")
        if mode.startswith("offloading")
        else KVConnectorConfig(num_cpu_blocks=2 * config.num_blocks, lazy_offload=mode == "lazy",
                               load_latency_steps=latency_steps,
                               store_latency_steps=latency_steps))
    return replace(workload, name=f"{workload.name}+offload-{mode}",
                   description=f"{workload.description}; CPU offload ({mode}), GPU pool / "
                               f"{gpu_share}",
                   config=replace(config, kv_connector=connector, max_model_len=max_model_len,
                                  num_blocks=max(need + 1, config.num_blocks // gpu_share)))
