"""Multimodal requests on upstream's scheduler without a multimodal model.

Upstream sizes the encoder's budget and cache from the model's multimodal registry (a vision
model's largest item), which a tiny text config on a CPU oracle does not have. The scheduler
only reads two numbers from it: `max_num_encoder_input_tokens` and the cache manager's size.
So the adapter builds the scheduler for the text model and then hands it the workload's
budget and a fresh `EncoderCacheManager` of the workload's size, through the same attributes
its `__init__` sets. Requests carry `MultiModalFeatureSpec`s with no data (the scheduler reads
identifiers and placeholder ranges only; the worker, which would read the data, is simulated).
"""

from __future__ import annotations

import sys
from typing import Any

from conformance.systems.protocol import EncoderCacheCounts
from workloads.model import EngineConfig, RequestSpec


def give_encoder(scheduler: Any, config: EngineConfig) -> None:
    """The workload's encoder budget and cache on a scheduler built for a text model."""
    mm = config.multimodal
    if mm is None:
        return
    from vllm.v1.core.encoder_cache_manager import (
        EncoderCacheManager,
        EncoderDecoderCacheManager,
    )

    budget, cache_size = encoder_sizes(scheduler.scheduler_config, config)
    scheduler.max_num_encoder_input_tokens = budget
    if config.is_encoder_decoder:
        # An encoder-decoder model (Whisper): upstream reads the flag from the model config.
        scheduler.is_encoder_decoder = True
        scheduler.encoder_cache_manager = EncoderDecoderCacheManager(cache_size=cache_size)
        return
    scheduler.encoder_cache_manager = EncoderCacheManager(cache_size=cache_size)


def encoder_sizes(scheduler_config: Any, config: EngineConfig) -> tuple[int, int]:
    """The encoder's budget and cache size: the workload's, or, when it names the model's
    largest item, what upstream's `compute_mm_encoder_budget` makes of them (it may refuse)."""
    mm = config.multimodal
    assert mm is not None
    if mm.max_tokens_per_item is None:
        return mm.max_num_encoder_input_tokens, mm.encoder_cache_size
    from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget

    scheduler_config.max_num_encoder_input_tokens = mm.max_num_encoder_input_tokens
    scheduler_config.encoder_cache_size = mm.encoder_cache_size
    budget, cache_size = compute_mm_encoder_budget(
        scheduler_config, {"image": mm.max_tokens_per_item} if mm.max_tokens_per_item else {})
    return int(budget), int(cache_size)


def mm_features(request: RequestSpec) -> list[Any] | None:
    """Upstream's feature specs for the request's items (None: a text request).

    Identifiers are interned (`sys.intern`): the pickle behind the `sha256` block hash writes
    a string it has seen in the same key once and then refers back to it, so a block holding
    two items of one image hashes differently depending on whether their identifiers are one
    object or two equal ones. A workload read in this process shares one object, the same
    workload decoded in a worker does not; interned, both sides always hash the one-object
    form (the twin's adapter interns too)."""
    if not request.mm_items:
        return None
    import torch
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

    return [MultiModalFeatureSpec(
        data=None, modality=item.modality, identifier=sys.intern(item.identifier),
        mm_position=PlaceholderRange(
            offset=item.offset, length=item.length,
            is_embed=None if item.is_embed is None else torch.tensor(item.is_embed)),
        mm_hash=sys.intern(item.identifier),
    ) for item in request.mm_items]


def encoder_schedule(out: Any) -> tuple[tuple[tuple[str, tuple[int, ...]], ...],
                                        tuple[str, ...]]:
    """The items each request encodes in a scheduler output, and the evicted entries."""
    inputs = tuple((rid, tuple(ids))
                   for rid, ids in (getattr(out, "scheduled_encoder_inputs", None) or {}).items())
    return inputs, tuple(getattr(out, "free_encoder_mm_hashes", None) or ())


def encoder_counts(scheduler: Any, config: EngineConfig) -> EncoderCacheCounts | None:
    """The encoder cache's room and entries (None: a text-only workload)."""
    if config.multimodal is None:
        return None
    cache = scheduler.encoder_cache_manager
    if config.is_encoder_decoder:  # room only; the identifiers the worker is still owed
        return EncoderCacheCounts(cache.num_free_slots, cache.num_free_slots,
                                  tuple(sorted({*cache.allocated, *cache.to_free})))
    return EncoderCacheCounts(cache.num_free_slots, cache.num_freeable_slots,
                              tuple(sorted(cache.cached)))


def encoder_input_stats(out: Any) -> tuple[int, int] | None:
    """(encoder inputs, their embeddings) of a scheduler output, logged per iteration (None:
    details off, nothing scheduled, or a release without the field)."""
    stats = getattr(out, "scheduled_encoder_input_stats", None)
    return None if stats is None else (int(stats.num_inputs), int(stats.output_tokens))
