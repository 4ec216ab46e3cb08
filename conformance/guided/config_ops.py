"""Mutation operators on a workload's engine config: a tighter pool, the campaign's config
draw, windows and caps at boundaries, one more attention kind (`mutate`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from conformance.campaign.families import draw_config
from workloads.model import KVCacheGroup, Workload


def tighter_pool(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """Fewer KV blocks (never fewer than a full-length request needs in every group)."""
    del donors
    config = workload.config
    per_group = -(-config.max_model_len // config.block_size) + 1
    floor = len(config.kv_cache_groups) * per_group + 1
    if config.num_blocks <= floor:
        return None
    blocks = rng.randint(floor, max(floor, (floor + config.num_blocks) // 2))
    return replace(workload, config=replace(config, num_blocks=blocks))


def other_config(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """The campaign's config draw once more: prefix caching, hashing, async, seats, budget."""
    del donors
    config, changes = draw_config(workload.config, rng)
    return replace(workload, config=config) if changes else None


WINDOW_TYPES = ("sliding_window", "chunked_local", "reference_window")
"""The group types with a length of their own (a window, a chunk)."""


def window_at_boundary(workload: Workload, rng: random.Random,
                       donors: Sequence[Workload]) -> Workload | None:
    """A window or chunk on a block boundary or one token either side of it."""
    del donors
    groups = list(workload.config.kv_cache_groups)
    windowed = [i for i, g in enumerate(groups) if g.type in WINDOW_TYPES]
    if not windowed:
        return None
    index = rng.choice(windowed)
    block = workload.config.block_size
    size = max(2, rng.randint(1, 6) * block + rng.choice((-1, 0, 1)))
    if groups[index].type == "chunked_local":
        size = max(block, size // block * block)  # chunks are whole blocks upstream
    group = groups[index]
    if group.type == "sliding_window":
        groups[index] = replace(group, sliding_window=size)
    elif group.type == "chunked_local":
        groups[index] = replace(group, attention_chunk_size=size)
    else:
        groups[index] = replace(group, rswa_window=size)
    return replace(workload, config=replace(workload.config, kv_cache_groups=tuple(groups)))


def add_group(workload: Workload, rng: random.Random,
              donors: Sequence[Workload]) -> Workload | None:
    """One more attention kind beside the model's (a sliding window or local chunks), so a
    hit is searched over one more group that may shorten it; the pool grows to keep a
    full-length request's blocks in every group."""
    del donors
    config = workload.config
    groups = config.kv_cache_groups
    if any(g.type not in ("full", *WINDOW_TYPES) for g in groups) or len(groups) >= 4:
        return None
    block = config.block_size
    if rng.random() < 0.5:
        group = KVCacheGroup("sliding_window", sliding_window=rng.randint(1, 4) * block
                             + rng.choice((-1, 0, 1)))
    else:
        group = KVCacheGroup("chunked_local", attention_chunk_size=rng.randint(1, 4) * block)
    grown = (*groups, group)
    floor = len(grown) * (-(-config.max_model_len // block) + 1) + 1
    return replace(workload, config=replace(config, kv_cache_groups=grown,
                                            num_blocks=max(config.num_blocks, floor)))


def cap_at_boundary(workload: Workload, rng: random.Random,
                    donors: Sequence[Workload]) -> Workload | None:
    """The token budget or the long-prefill threshold at a prompt's length, or one token
    either side of it: the chunk that just fits, and the one that just does not."""
    del donors
    config = workload.config
    lengths = [r.prompt_len for r in workload.requests] or [config.block_size]
    target = max(1, rng.choice(lengths) + rng.choice((-1, 0, 1)))
    if rng.random() < 0.5:
        floor = config.max_num_seqs if config.enable_chunked_prefill else max(
            config.max_num_seqs, config.max_model_len)
        return replace(workload, config=replace(config, max_num_batched_tokens=max(floor,
                                                                                   target)))
    if config.is_encoder_decoder:
        return None  # upstream runs an encoder-decoder model with no threshold
    threshold = max(target, 1 + config.num_spec_tokens) if config.num_spec_tokens else target
    return replace(workload, config=replace(config, long_prefill_token_threshold=threshold))


ASPECTS: dict[str, tuple[str, ...]] = {
    "layout": ("kv_cache_groups", "hash_block_size", "block_size", "num_blocks",
               "prefix_cache_retention_interval"),
    "connector": ("kv_connector",),
    "spec_decode": ("num_spec_tokens", "spec_method", "num_lookahead_tokens"),
    "scheduling": ("policy", "async_scheduling", "max_num_seqs", "max_num_batched_tokens",
                   "long_prefill_token_threshold", "enable_chunked_prefill",
                   "prefill_schedule_interval"),
    "caching": ("enable_prefix_caching", "hash_algo", "enable_mamba_shared_prefix_checkpoint"),
}
"""The parts of an engine config that travel together from a donor (`cross_aspect`)."""


def cross_aspect(workload: Workload, rng: random.Random,
                 donors: Sequence[Workload]) -> Workload | None:
    """One aspect of another corpus entry's config (its KV layout, its connector, its spec
    decoding, its scheduling, its caching) on this workload's requests: combinations no single
    family draws, such as a three-kind hybrid under an offload tier with drafts."""
    config = workload.config
    others = [d for d in donors if d.config != config and d.pd_pair is None]
    if not others or workload.pd_pair is not None:
        return None
    donor = rng.choice(others).config
    names = ASPECTS[rng.choice(tuple(ASPECTS))]
    changes = {name: getattr(donor, name) for name in names
               if getattr(donor, name) != getattr(config, name)}
    if not changes:
        return None
    crossed = replace(config, **changes)
    floor = len(crossed.kv_cache_groups) * (-(-crossed.max_model_len // crossed.block_size)
                                            + 1) + 1
    return replace(workload, config=replace(crossed, num_blocks=max(crossed.num_blocks, floor)))
