"""Decode context parallelism (DCP) as the scheduler sees it: bigger blocks.

Why this exists: long-context decode (DeepSeek's MLA models above all) runs with
`--decode-context-parallel-size N`, which shards each sequence's attention KV over N ranks by
token position. Every rank still has `num_blocks` blocks of `block_size` tokens, and the
scheduler still hands out one block table per group for all ranks together, so one block id
now stands for `block_size` tokens on each of the N ranks: `block_size` x N tokens of the
sequence. Hits, hashes, admission, caching and block counts all work in those bigger blocks;
nothing else in the scheduler changes.

Only sharded groups scale. Attention caches are sharded; a mamba state is one per request and
stays replicated (its blocks keep their size), as do draft groups whose drafter runs without
DCP. Upstream's hybrid coordinator refuses a sharded group that is not full attention (a
window or chunk is a span of positions, which sharding by position would break), so the twin
models DCP for full-attention and mamba groups and refuses every other kind in one line.
Beside mamba 'align' the hash block is the (unscaled) block, finer than the scaled
full-attention blocks, so hits may end inside one (`impl.core.partial_hits`): under DCP a
mamba state as wide as the hash block is enough for that, where without DCP it must be wider.

Prefill context parallelism (PCP) has no scheduler side: upstream's scheduler builds its
KV-cache manager with a PCP size of 1, so the twin has no such setting.
"""

from __future__ import annotations

import dataclasses

from impl.core.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    ReferenceWindowSpec,
)
from vtwin.errors import ReleaseCheckFailed


def check_dcp_layout(kv_cache_config: KVCacheConfig, dcp_world_size: int) -> None:
    """Refuse, naming the group, a layout the twin does not model with DCP."""
    if dcp_world_size < 1:
        raise ValueError(f"decode_context_parallel_size: must be >= 1 (got {dcp_world_size})")
    if dcp_world_size == 1:
        return
    for index, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if isinstance(spec, MambaSpec):
            continue  # replicated: its blocks keep their size
        if not isinstance(spec, FullAttentionSpec) or isinstance(spec, ReferenceWindowSpec):
            raise ValueError(f"kv_cache_groups[{index}]: {type(spec).__name__} with "
                             f"decode_context_parallel_size {dcp_world_size} is not "
                             "implemented by the twin (DCP is twinned for full attention and "
                             "mamba)")


def dcp_scheduler_view(kv_cache_config: KVCacheConfig, dcp_world_size: int) -> KVCacheConfig:
    """`kv_cache_config` as the scheduler sees it under DCP: every full-attention group's
    blocks span `block_size` x `dcp_world_size` tokens, mamba groups' are unchanged, and the
    config records the world size. The config itself is returned when DCP is off."""
    check_dcp_layout(kv_cache_config, dcp_world_size)
    if dcp_world_size == 1:
        return kv_cache_config
    groups = tuple(
        KVCacheGroupSpec(group.layer_names, group.kv_cache_spec
                         if isinstance(group.kv_cache_spec, MambaSpec) else dataclasses.replace(
            group.kv_cache_spec, block_size=group.kv_cache_spec.block_size * dcp_world_size))
        for group in kv_cache_config.kv_cache_groups)
    return dataclasses.replace(kv_cache_config, kv_cache_groups=groups,
                               dcp_world_size=dcp_world_size)


def rank_block_size(spec: KVCacheSpec, dcp_world_size: int) -> int:
    """A group's block as each rank holds it: a full-attention block of the view divided by
    the ranks, a replicated (mamba) block as it is."""
    if isinstance(spec, FullAttentionSpec):
        return spec.block_size // dcp_world_size
    return spec.block_size


def check_reused_block_events(request_id: str, group_id: int, rank_block: int,
                              hash_block_size: int) -> None:
    """Upstream (0.32 and 0.33) emits a full-report request's reused-block events at each
    group's per-rank block size. Where the hash block does not divide it (DCP without a
    finer hash block: hashes span the scheduler's block, wider than a rank's), viewing the
    hashes at that size fails an assertion and the engine stops. The twin stops alike, on
    release check `dcp-reused-block-events`
    (`conformance/upstream_bugs/dcp-reused-block-events.jsonl`)."""
    if rank_block % hash_block_size:
        raise ReleaseCheckFailed("dcp-reused-block-events", (
            f"request {request_id}: its prefix hit in group {group_id} is reported in full "
            f"(kv_cache_report_mode full), and upstream views the {hash_block_size}-token "
            f"block hashes at the group's per-rank block of {rank_block} tokens"))
