"""Per-step trace JSONL for any system, in the spirit of seed 002's per-step tracer.

One line per driver step: the snapshot before it (queues in visiting order, block counts, the
free queue's first block ids and the cached block ids),
the prefix-cache events the step caused, and the decision after it (the full `StepRecord`).
Active, cached and empty blocks are kept apart as seed 003 section 8 asks: "free" alone hides
whether a free block still holds reusable prefix-cache content.

Lines are written with a fixed key order and no whitespace, and every value is deterministic
(sets are sorted by the adapters, NONE_HASH is pinned), so two runs of one workload write
byte-identical traces whatever PYTHONHASHSEED is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from conformance.sched.driver import Step
from conformance.systems.protocol import BlockCounts, CacheEvent, SystemState

TRACE_FORMAT = "vtwin-sched-trace/1"


def blocks_json(blocks: BlockCounts) -> dict[str, int]:
    return {"active": blocks.active, "cached": blocks.cached, "empty": blocks.empty}


def state_json(state: SystemState) -> dict[str, Any]:
    """Queues and block counts, plus the free queue's head and the cached block ids when the
    system reports them (display only: the block timeline of the divergence view)."""
    out: dict[str, Any] = {"running": list(state.running), "waiting": list(state.waiting),
                           "blocks": blocks_json(state.blocks)}
    if state.free_head is not None:
        out["free_head"] = list(state.free_head)
    if state.cached_ids is not None:
        out["cached_ids"] = id_ranges(state.cached_ids)
    return out


def id_ranges(ids: Sequence[int]) -> str:
    """Block ids as sorted runs, ``"3-9,12"``: a long replay's cached set is thousands of
    ids every step (as a list it doubled a 14,000-block trace; as runs it adds 2%)."""
    runs: list[list[int]] = []
    for block in sorted(ids):
        if runs and block == runs[-1][1] + 1:
            runs[-1][1] = block
        else:
            runs.append([block, block])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_id_ranges(text: str) -> list[int]:
    """The ids `id_ranges` wrote, sorted."""
    ids: list[int] = []
    for run in filter(None, text.split(",")):
        first, _, last = run.partition("-")
        ids.extend(range(int(first), int(last or first) + 1))
    return ids


def event_json(event: CacheEvent) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": event.kind}
    if event.kind != "cleared":
        out["group"] = event.group
        out["block_hashes"] = list(event.block_hashes)
    if event.kind == "stored":
        out["parent_hash"] = event.parent_hash
        out["num_tokens"] = event.num_tokens
    if event.medium != "GPU":
        out["medium"] = event.medium
    return out


def step_json(step: Step) -> dict[str, Any]:
    return {
        "step": step.record.step,
        "before": state_json(step.before),
        "events": [event_json(e) for e in step.events],
        "after": step.record.to_json(),
    }


def dumps_line(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=True) + "\n"


class TraceWriter:
    """Streams a trace to `path` (``-``: standard output): a header line naming the format,
    system and workload, then one line per step."""

    def __init__(self, path: Path, system: str, workload: str) -> None:
        self.path = path
        self._owned = str(path) != "-"
        if self._owned:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] = path.open("w", encoding="utf-8", newline="\n")
        else:
            self._file = sys.stdout
        self._file.write(dumps_line({"format": TRACE_FORMAT, "system": system,
                                     "workload": workload}))

    def write(self, step: Step) -> None:
        self._file.write(dumps_line(step_json(step)))

    def close(self) -> None:
        if self._owned:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def read_trace(path: Path) -> list[dict[str, Any]]:
    """All lines of a trace, header first."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]
