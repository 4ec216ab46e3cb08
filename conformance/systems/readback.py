"""Reading a scheduler back into the canonical records: block ids and tables, block hashes,
spec-decoding counts. Shared by the adapters (the twin's, upstream's), which hold objects of
the same shape (`KVCacheBlocks`, requests with `block_hashes`, `SpecDecodingStats`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conformance.systems.protocol import CacheStats, Scheduled, SpecDecodingCounts, SpecMetrics
from conformance.systems.transfer_records import BlockIds


def block_ids(per_group: Sequence[Sequence[int]]) -> BlockIds:
    """Block ids per group as the records hold them (tuples: hashable, comparable)."""
    return tuple(tuple(ids) for ids in per_group)


def block_hashes_of(requests: Mapping[str, Any],
                    since: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
    """Block hashes (full hex) of each request in `since`, from index `since[id]` on, read from
    a scheduler's `requests` map (impl's and upstream's requests both keep `block_hashes`).
    Unknown requests and requests with nothing new are left out."""
    hashes = {}
    for rid, start in since.items():
        request = requests.get(rid)
        if request is not None and len(request.block_hashes) > start:
            hashes[rid] = tuple(bytes(h).hex() for h in request.block_hashes[start:])
    return hashes


def block_tables_of(manager: Any, request_ids: Sequence[str]) -> dict[str, BlockIds]:
    """The whole non-empty block tables of `request_ids` from a KV-cache manager (impl's or
    upstream's: both expose `get_block_ids(request_id)`)."""
    tables = {}
    for rid in request_ids:
        ids = block_ids(manager.get_block_ids(rid))
        if any(ids):
            tables[rid] = ids
    return tables


def external_hash(value: bytes | int) -> str:
    """A block hash as KV events show it: upstream's default (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES)
    keeps the low 64 bits of the big-endian hash; 16 hex digits either way."""
    if isinstance(value, bytes):
        value = int.from_bytes(value, "big")
    return f"{value & ((1 << 64) - 1):016x}"


def cache_stats(stats: Any) -> CacheStats | None:
    """A prefix-cache stats object (impl's or upstream's `PrefixCacheStats`) as the record; a
    connector's hits split by source are keyed by the source's name (both sides' enums are
    strings)."""
    if stats is None:
        return None
    by_source = getattr(stats, "hits_by_source", None) or {}
    return CacheStats(stats.requests, stats.queries, stats.hits, stats.preempted_requests,
                      stats.preempted_queries, stats.preempted_hits, bool(stats.reset),
                      tuple(sorted((str(getattr(source, "value", source)), count)
                                   for source, count in by_source.items())))


def spec_counts(stats: Any) -> SpecDecodingCounts | None:
    """A scheduler's `SpecDecodingStats` (the twin's or upstream's: the same field names) as
    canonical counts; None stays None."""
    if stats is None:
        return None
    return SpecDecodingCounts(stats.num_drafts, stats.num_draft_tokens,
                              stats.num_accepted_tokens,
                              tuple(stats.num_accepted_tokens_per_pos),
                              tuple(stats.num_draft_tokens_per_pos))


def request_spec_metrics(metrics: Any) -> SpecMetrics | None:
    """A finished request's speculative-decoding metrics, from either system's accumulator
    (the twin's `RequestSpecMetrics`, upstream's `RequestSpecDecodeMetrics`), or None."""
    if metrics is None:
        return None
    return SpecMetrics(tuple(metrics.histogram), metrics.num_draft_tokens,
                       tuple(metrics.per_step_accepted), tuple(metrics.per_step_drafted))


def grammar_rows(grammar_output: Any) -> tuple[tuple[str, int], ...]:
    """A step's grammar bitmask rows (`get_grammar_bitmask`'s output, None: no row): per
    structured-output request in batch order, how many of its drafts the mask covers."""
    if grammar_output is None:
        return ()
    drafts = grammar_output.num_acceptable_drafts
    ids = grammar_output.structured_output_request_ids
    return tuple(zip(ids, [0] * len(ids) if drafts is None else drafts, strict=True))


def resolved(scheduled: Scheduled, spec_tokens: Mapping[str, Sequence[int]],
             grammar_output: Any) -> Scheduled:
    """`scheduled` (a `Scheduled`) after its deferred sampling was resolved: the drafts now
    scheduled and the bitmask's rows."""
    from dataclasses import replace

    return replace(scheduled, spec_tokens=tuple((rid, tuple(ids))
                                                for rid, ids in spec_tokens.items()),
                   grammar_rows=grammar_rows(grammar_output), pending_grammar=False)
