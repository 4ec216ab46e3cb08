"""`StepRecord`: everything observable about one engine step, canonical and comparable.

A record is plain data (ints, strings, tuples of them) so it can be diffed, hashed and written
as JSON. Its JSON form is the comparison form too: the comparer walks `to_json()` in field
order, so the first differing field it reports is the first one listed here. Sets the
scheduler keeps (finished, preempted, resumed ids) are sorted by the adapters; ordered things
(the scheduling order, queue order) keep their order.

`block_tables` holds the whole table of every scheduled request whose table changed since
the system's previous record (allocation, sliding-window recycling, a resume after preemption);
unchanged tables are left out, which keeps traces of long replays small without hiding a change.
`new_block_hashes` does the same for block hashes: per request scheduled or updated in the step,
the hashes (full hex) computed since its previous record, so a wrong chaining, extra key or
NONE_HASH shows at the step it first happens. `events` are the step's KV-cache events (stored,
removed, cleared with every hash), the stream a KV-aware router would consume.

One record per driver step, including idle steps (no request known yet) and, under async
scheduling, steps that schedule a batch without applying one. `applied_step` says which step's
batch had its output applied in this step (always `step` itself in the sync loop).
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass
from typing import Any

from conformance.sched.record_connector import (
    connector_fields,
    connector_json,
    output_json,
    output_of,
)
from conformance.sched.record_encoder import encoder_fields, encoder_json
from conformance.sched.record_stats import cache_json, cache_of, stats_from_json, stats_json
from conformance.systems.protocol import (
    BlockCounts,
    CacheEvent,
    CacheStats,
    EncoderCacheCounts,
    SchedulerStats,
    TokenOutput,
)
from conformance.systems.transfer_records import (
    BlockIds,
    ConnectorReport,
    JobTransfers,
    MultiTransfers,
    RemoteTransfers,
    Transfers,
)

SCHEDULE_FIELDS: tuple[str, ...] = (
    "step", "num_scheduled_tokens", "preempted", "finished", "aborted", "finish_reasons",
)
"""What the `schedule` level compares: token counts, preemptions and finishes only."""

REQUEST_KEYED_FIELDS: frozenset[str] = frozenset({
    "num_scheduled_tokens", "num_computed_tokens", "num_output_tokens", "spec_tokens",
    "new_block_ids", "block_tables", "new_block_hashes", "outputs", "finish_reasons",
    "encoder_inputs",
})
"""Fields whose JSON form is a dict keyed by request id."""

BLOCK_ID_FIELDS: frozenset[str] = frozenset({"new_block_ids", "block_tables",
                                             "block_copies"})
"""Fields holding physical block ids: the `renamed` level compares them up to a bijection."""

FREE_QUEUE_FIELDS: frozenset[str] = frozenset({"free_head", "cached_digest"})
"""The free queue's head and a digest of the cached free blocks: compared at `exact` only (a
pool renumbering blocks keeps neither), and only when both systems can see them (None: not
observed, e.g. an older release's adapter)."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    scheduled: bool
    scheduled_new: tuple[str, ...]
    scheduled_cached: tuple[str, ...]
    scheduled_resumed: tuple[str, ...]
    num_scheduled_tokens: tuple[tuple[str, int], ...]
    total_num_scheduled_tokens: int
    num_computed_tokens: tuple[tuple[str, int], ...]
    num_output_tokens: tuple[tuple[str, int], ...]
    spec_tokens: tuple[tuple[str, tuple[int, ...]], ...]
    new_block_ids: tuple[tuple[str, BlockIds | None], ...]
    block_tables: tuple[tuple[str, BlockIds], ...]
    new_block_hashes: tuple[tuple[str, tuple[str, ...]], ...]
    preempted: tuple[str, ...]
    finished: tuple[str, ...]
    aborted: tuple[str, ...]
    num_common_prefix_blocks: tuple[int, ...]
    applied_step: int | None
    outputs: tuple[TokenOutput, ...]
    blocks: BlockCounts
    num_running: int
    num_waiting: int
    prefix_cache: CacheStats | None
    events: tuple[CacheEvent, ...] = ()
    # Beside a KV connector: its lookups, hits and their sources (None without one).
    connector_prefix_cache: CacheStats | None = None
    scheduler_stats: SchedulerStats | None = None
    free_head: tuple[int, ...] | None = None
    cached_digest: str | None = None
    # A KV connector (all None / empty without one): the step's transfers, the external hits
    # its admissions took, the worker's report applied in this step, the CPU tier's counts.
    transfers: Transfers | JobTransfers | RemoteTransfers | MultiTransfers | None = None
    external_hits: tuple[tuple[str, int], ...] = ()
    connector_report: ConnectorReport | None = None
    cpu_blocks: BlockCounts | None = None
    # A multimodal model (all empty / None without one): the items each request encodes, the
    # encoder-cache entries evicted, the encoder cache after the step.
    encoder_inputs: tuple[tuple[str, tuple[int, ...]], ...] = ()
    freed_encoder_ids: tuple[str, ...] = ()
    encoder_cache: EncoderCacheCounts | None = None
    # With iteration details logged: (encoder inputs, their embeddings) the step schedules.
    encoder_input_stats: tuple[int, int] | None = None
    # Structured output (empty without): the grammar bitmask's rows, (request, drafts covered).
    grammar_rows: tuple[tuple[str, int], ...] = ()
    # Operations between steps applied before this step was scheduled, with their results
    # (a reset's success; None for the others).
    controls: tuple[tuple[str, bool | None], ...] = ()
    # Bounded replay (sliding windows that keep no prefix cache): where each new request's
    # recomputed tail starts, for those that replay (empty otherwise).
    replay_starts: tuple[tuple[str, int], ...] = ()
    # Sub-block hits: the copy-on-write pairs (source, copy) the step's output carries.
    block_copies: tuple[tuple[int, int], ...] = ()
    # The output tells the worker to finish a connector's loads before the forward.
    has_sync_kv_loads: bool = False

    def finish_reasons(self) -> dict[str, str]:
        return {o.req_id: o.finish_reason for o in self.outputs if o.finish_reason is not None}

    def request_ids(self) -> set[str]:
        """Every request this step mentions (for a divergence's "requests involved")."""
        ids = set(self.scheduled_new) | set(self.scheduled_cached) | set(self.preempted)
        ids |= set(self.finished) | set(self.aborted) | {o.req_id for o in self.outputs}
        return ids

    def to_json(self) -> dict[str, Any]:
        """The JSON form, in field order; also what the comparer compares."""
        return {
            "step": self.step,
            "scheduled": self.scheduled,
            "scheduled_new": list(self.scheduled_new),
            "scheduled_cached": list(self.scheduled_cached),
            "scheduled_resumed": list(self.scheduled_resumed),
            "num_scheduled_tokens": dict(self.num_scheduled_tokens),
            "total_num_scheduled_tokens": self.total_num_scheduled_tokens,
            "num_computed_tokens": dict(self.num_computed_tokens),
            "num_output_tokens": dict(self.num_output_tokens),
            "spec_tokens": {rid: list(ids) for rid, ids in self.spec_tokens},
            "new_block_ids": {rid: _ids_json(ids) for rid, ids in self.new_block_ids},
            "block_tables": {rid: _ids_json(ids) for rid, ids in self.block_tables},
            "new_block_hashes": {rid: list(h) for rid, h in self.new_block_hashes},
            "preempted": list(self.preempted),
            "finished": list(self.finished),
            "aborted": list(self.aborted),
            "num_common_prefix_blocks": list(self.num_common_prefix_blocks),
            "applied_step": self.applied_step,
            "outputs": {o.req_id: output_json(o) for o in self.outputs},
            "finish_reasons": self.finish_reasons(),
            "blocks": {"active": self.blocks.active, "cached": self.blocks.cached,
                       "empty": self.blocks.empty},
            "num_running": self.num_running,
            "num_waiting": self.num_waiting,
            "prefix_cache": cache_json(self.prefix_cache),
            **({} if self.connector_prefix_cache is None
               else {"connector_prefix_cache": cache_json(self.connector_prefix_cache)}),
            "events": [_event_json(e) for e in self.events],
            "scheduler_stats": None if self.scheduler_stats is None
            else stats_json(self.scheduler_stats),
            "free_head": None if self.free_head is None else list(self.free_head),
            "cached_digest": self.cached_digest,
            **connector_json(self.transfers, self.external_hits, self.connector_report,
                             self.cpu_blocks),
            **encoder_json(self.encoder_inputs, self.freed_encoder_ids, self.encoder_cache,
                           self.encoder_input_stats),
            **({"grammar_rows": [[rid, n] for rid, n in self.grammar_rows]}
               if self.grammar_rows else {}),
            **({"controls": [[action, result] for action, result in self.controls]}
               if self.controls else {}),
            **({"replay_starts": dict(self.replay_starts)} if self.replay_starts else {}),
            **({"block_copies": [list(pair) for pair in self.block_copies]}
               if self.block_copies else {}),
            **({"has_sync_kv_loads": True} if self.has_sync_kv_loads else {}),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> StepRecord:
        """The inverse of `to_json` (for golden files and traces read back)."""
        pc = data["prefix_cache"]
        return StepRecord(
            step=data["step"],
            scheduled=data["scheduled"],
            scheduled_new=tuple(data["scheduled_new"]),
            scheduled_cached=tuple(data["scheduled_cached"]),
            scheduled_resumed=tuple(data["scheduled_resumed"]),
            num_scheduled_tokens=tuple(data["num_scheduled_tokens"].items()),
            total_num_scheduled_tokens=data["total_num_scheduled_tokens"],
            num_computed_tokens=tuple(data["num_computed_tokens"].items()),
            num_output_tokens=tuple(data["num_output_tokens"].items()),
            spec_tokens=tuple((k, tuple(v)) for k, v in data["spec_tokens"].items()),
            new_block_ids=tuple((k, _ids_tuple(v)) for k, v in data["new_block_ids"].items()),
            block_tables=tuple((k, _ids_tuple(v) or ()) for k, v in data["block_tables"].items()),
            new_block_hashes=tuple((k, tuple(v))
                                   for k, v in data.get("new_block_hashes", {}).items()),
            preempted=tuple(data["preempted"]),
            finished=tuple(data["finished"]),
            aborted=tuple(data["aborted"]),
            num_common_prefix_blocks=tuple(data["num_common_prefix_blocks"]),
            applied_step=data["applied_step"],
            outputs=tuple(output_of(rid, o) for rid, o in data["outputs"].items()),
            blocks=BlockCounts(**data["blocks"]),
            num_running=data["num_running"],
            num_waiting=data["num_waiting"],
            prefix_cache=None if pc is None else cache_of(pc),
            connector_prefix_cache=None if data.get("connector_prefix_cache") is None
            else cache_of(data["connector_prefix_cache"]),
            events=tuple(CacheEvent(e["kind"], e["group"], tuple(e["block_hashes"]),
                                    e["parent_hash"], e["num_tokens"],
                                    tuple(e.get("token_ids", ())), e.get("block_size", 0),
                                    e.get("lora_name"), e.get("medium", "GPU"))
                         for e in data.get("events", ())),
            scheduler_stats=None if data.get("scheduler_stats") is None
            else stats_from_json(data["scheduler_stats"]),
            free_head=None if data.get("free_head") is None else tuple(data["free_head"]),
            cached_digest=data.get("cached_digest"),
            **connector_fields(data),
            **encoder_fields(data),
            grammar_rows=tuple((rid, n) for rid, n in data.get("grammar_rows", ())),
            controls=tuple((action, result) for action, result in data.get("controls", ())),
            replay_starts=tuple(data.get("replay_starts", {}).items()),
            block_copies=tuple((s, d) for s, d in data.get("block_copies", ())),
            has_sync_kv_loads=bool(data.get("has_sync_kv_loads", False)),
        )


def cached_digest(cached_ids: tuple[int, ...] | None) -> str | None:
    """The cached free blocks as `COUNT:CRC32` of their sorted ids: a big pool caches thousands,
    too many to carry in every record, yet which blocks survived eviction is what an eviction
    bug changes first (the divergence view shows the ids themselves, from the states)."""
    if cached_ids is None:
        return None
    packed = array("q", sorted(cached_ids)).tobytes()
    return f"{len(cached_ids)}:{zlib.crc32(packed):08x}"


def _ids_json(ids: BlockIds | None) -> list[list[int]] | None:
    return None if ids is None else [list(group) for group in ids]


def _ids_tuple(ids: list[list[int]] | None) -> BlockIds | None:
    return None if ids is None else tuple(tuple(group) for group in ids)


def _event_json(event: CacheEvent) -> dict[str, Any]:
    """The event as compared and written; the tier only when it is not the GPU's (a
    connector's own), so recordings of GPU events read as before."""
    return {"kind": event.kind, "group": event.group, "block_hashes": list(event.block_hashes),
            "parent_hash": event.parent_hash, "num_tokens": event.num_tokens,
            "token_ids": list(event.token_ids), "block_size": event.block_size,
            "lora_name": event.lora_name,
            **({"medium": event.medium} if event.medium != "GPU" else {})}
