"""A step record's statistics in JSON and back: prefix-cache stats (the local cache's and,
beside a connector, the connector's with its hits by source) and the scheduler's stats. Fields
at their defaults are left out, so older traces and golden files keep their bytes."""

from __future__ import annotations

from typing import Any

from conformance.systems.protocol import CacheStats, SchedulerStats, SpecDecodingCounts


def cache_json(stats: CacheStats | None) -> dict[str, Any] | None:
    """Prefix-cache stats in JSON; a reset and the hits by source only when there are any."""
    if stats is None:
        return None
    return {"requests": stats.requests, "queries": stats.queries, "hits": stats.hits,
            "preempted_requests": stats.preempted_requests,
            "preempted_queries": stats.preempted_queries,
            "preempted_hits": stats.preempted_hits,
            **({"reset": True} if stats.reset else {}),
            **({"hits_by_source": dict(stats.hits_by_source)} if stats.hits_by_source else {})}


def cache_of(data: dict[str, Any]) -> CacheStats:
    by_source = tuple(sorted(data.get("hits_by_source", {}).items()))
    return CacheStats(**{k: v for k, v in data.items() if k != "hits_by_source"},
                      hits_by_source=by_source)


def stats_json(stats: SchedulerStats) -> dict[str, Any]:
    """The scheduler's stats in JSON; fields at their defaults are left out (older traces and
    golden files keep their bytes)."""
    out: dict[str, Any] = {"num_running_reqs": stats.num_running_reqs,
                           "num_waiting_reqs": stats.num_waiting_reqs,
                           "kv_cache_usage": stats.kv_cache_usage}
    if stats.num_skipped_waiting_reqs:
        out["num_skipped_waiting_reqs"] = stats.num_skipped_waiting_reqs
    spec = stats.spec_decoding
    if spec is not None:
        out["spec_decoding"] = {"num_drafts": spec.num_drafts,
                                "num_draft_tokens": spec.num_draft_tokens,
                                "num_accepted_tokens": spec.num_accepted_tokens,
                                "accepted_per_pos": list(spec.accepted_per_pos),
                                "drafts_per_pos": list(spec.drafts_per_pos)}
    return out


def stats_from_json(data: dict[str, Any]) -> SchedulerStats:
    spec = data.get("spec_decoding")
    return SchedulerStats(
        data["num_running_reqs"], data["num_waiting_reqs"], data["kv_cache_usage"],
        data.get("num_skipped_waiting_reqs", 0),
        None if spec is None else SpecDecodingCounts(
            spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"],
            tuple(spec["accepted_per_pos"]), tuple(spec["drafts_per_pos"])))
