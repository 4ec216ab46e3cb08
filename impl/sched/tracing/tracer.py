"""Seed 002's per-step scheduler trace: a snapshot before, prefix-cache events, a decision.

Records are frozen and slotted; `Tracer` only collects them in memory (the harness writes
JSONL and draws the viewer page). The scheduler holds `tracer = None` unless someone attaches
one, and checks that before building any record, so tracing costs nothing when it is off.

| record             | when                                  | fields of note                     |
| ------------------ | ------------------------------------- | ---------------------------------- |
| `StepSnapshot`     | top of schedule(), after pins expire  | free/cached/total GPU blocks, CPU  |
|                    |                                       | tier (None: no offload here), pins |
| `PrefixCacheEvent` | each prefix-cache lookup at admission | local and external hit tokens      |
| `StepDecision`     | end of schedule()                     | new/resumed/running/preempted ids  |
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StepSnapshot:
    step: int
    num_running: int
    num_waiting: int
    free_blocks: int
    total_blocks: int
    gpu_cached_blocks: int
    cpu_free_blocks: int | None
    cpu_total_blocks: int | None
    cpu_cached_blocks: int | None
    num_pinned: int
    pinned_blocks: int  # summed over pins, as the seed counts (a shared prefix counts per pin)
    pinned_job_ids: tuple[str, ...]
    max_num_running_reqs: int
    max_num_scheduled_tokens: int
    pinned_unique_blocks: int = 0  # distinct blocks some pin holds (what pins take from the pool)
    kind: str = "step_snapshot"


@dataclass(frozen=True, slots=True)
class PrefixCacheEvent:
    step: int
    req_id: str
    job_id: str | None
    local_hit_tokens: int
    external_hit_tokens: int
    total_prompt_tokens: int
    num_tokens: int
    kind: str = "prefix_cache_event"


@dataclass(frozen=True, slots=True)
class StepDecision:
    step: int
    scheduled_new_req_ids: tuple[str, ...]
    scheduled_resumed_req_ids: tuple[str, ...]
    scheduled_running_req_ids: tuple[str, ...]
    preempted_req_ids: tuple[str, ...]
    num_scheduled_tokens: tuple[tuple[str, int], ...]
    total_scheduled_tokens: int
    kind: str = "step_decision"


TraceRecord = StepSnapshot | PrefixCacheEvent | StepDecision


def record_json(record: TraceRecord) -> dict[str, Any]:
    """The JSON form (tuples as lists), `kind` first so a JSONL line says what it is."""
    data = asdict(record)
    return {"kind": data.pop("kind"), **data}


class Tracer:
    """Collects trace records in order; `take` hands them over and starts afresh."""

    def __init__(self) -> None:
        self.records: list[TraceRecord] = []
        self.step = 0  # the step of the schedule() call being traced
        self.calls = 0  # schedule() calls traced so far

    def add(self, record: TraceRecord) -> None:
        self.records.append(record)

    def take(self) -> list[TraceRecord]:
        records, self.records = self.records, []
        return records
