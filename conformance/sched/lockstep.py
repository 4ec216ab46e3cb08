"""Run two systems on one workload in lockstep and compare every step at every level.

Both drivers advance one step at a time; each step's pair of records goes to one comparer per
level. Comparing at all three levels in one run is what lets a report say which level a
workload reaches (and where each stricter level first broke) without running it three times.
The run stops early once even the `schedule` level has diverged: past that point the two
systems are running different schedules and nothing more can be learned.

A system that raises (an impl assertion, an integrity check, a stall) ends the run with an
error; an errored workload reaches no level.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from conformance.sched.compare import LEVELS, Comparer, Divergence
from conformance.sched.driver import Driver, Step
from conformance.sched.record import StepRecord
from conformance.sched.system import SystemFactory
from conformance.sched.trace import TraceWriter
from workloads.model import Workload

Progress = Callable[[str, int], None]
"""Called as progress(workload_name, step) every `progress_every` steps."""


@dataclass(frozen=True, slots=True)
class Series:
    """Per-step block counts and queue depths of one side, for plots."""

    active: tuple[int, ...]
    cached: tuple[int, ...]
    empty: tuple[int, ...]
    running: tuple[int, ...]
    waiting: tuple[int, ...]

    @staticmethod
    def of(records: list[StepRecord]) -> Series:
        return Series(
            tuple(r.blocks.active for r in records), tuple(r.blocks.cached for r in records),
            tuple(r.blocks.empty for r in records), tuple(r.num_running for r in records),
            tuple(r.num_waiting for r in records),
        )


@dataclass(frozen=True, slots=True)
class LockstepResult:
    workload: str
    left: str
    right: str
    steps: int
    divergences: tuple[Divergence, ...]
    error: str | None
    error_detail: str | None
    seconds: float
    left_series: Series
    right_series: Series

    @property
    def level_reached(self) -> str | None:
        """The strictest level with no divergence (None: not even `schedule`, or an error)."""
        if self.error is not None:
            return None
        diverged = {d.level for d in self.divergences}
        return next((level for level in LEVELS if level not in diverged), None)

    def divergence_at(self, level: str) -> Divergence | None:
        return next((d for d in self.divergences if d.level == level), None)


def trace_name(workload: str, side: str, system: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", workload)
    return f"{safe}.{side}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', system)}.trace.jsonl"


def run_lockstep(
    workload: Workload,
    left: SystemFactory,
    right: SystemFactory,
    *,
    trace_dir: Path | None = None,
    progress: Progress | None = None,
    progress_every: int = 200,
    integrity_every: int = 1,
    max_steps: int | None = None,
    context: int = 3,
) -> LockstepResult:
    started = time.monotonic()
    comparers = [Comparer(workload.name, level, context) for level in LEVELS]
    records: tuple[list[StepRecord], list[StepRecord]] = ([], [])
    names = ["left", "right"]
    writers: list[TraceWriter] = []
    error: str | None = None
    detail: str | None = None
    step = 0
    side = 0
    try:
        systems = []
        for side, factory in enumerate((left, right)):
            systems.append(factory(workload.config))
            names[side] = systems[side].name
        drivers = [Driver(s, workload, integrity_every=integrity_every, max_steps=max_steps,
                          snapshot_before=trace_dir is not None) for s in systems]
        if trace_dir is not None:
            writers = [TraceWriter(trace_dir / trace_name(workload.name, label, s.name),
                                   s.name, workload.name)
                       for label, s in zip(("left", "right"), systems, strict=True)]
        streams: list[Iterator[Step]] = [d.steps() for d in drivers]
        while True:
            pair: list[Step | None] = []
            for index, stream in enumerate(streams):
                side = index  # named in the error message if this side raises
                pair.append(next(stream, None))
            if pair[0] is None and pair[1] is None:
                break
            for index, got in enumerate(pair):
                if got is not None:
                    records[index].append(got.record)
                    if writers:
                        writers[index].write(got)
            left_record = None if pair[0] is None else pair[0].record
            right_record = None if pair[1] is None else pair[1].record
            left_json = None if left_record is None else left_record.to_json()
            right_json = None if right_record is None else right_record.to_json()
            for comparer in comparers:
                comparer.feed(left_record, right_record, left_json, right_json)
            step += 1
            if comparers[-1].divergence is not None:
                break
            if progress is not None and step % progress_every == 0:
                progress(workload.name, step)
    except Exception as err:  # a system failed: report it, do not crash the whole suite
        error = f"{('left', 'right')[side]} system {names[side]} raised " \
                f"{type(err).__name__} at step {step}: {err}"
        detail = traceback.format_exc(limit=8)
    finally:
        for writer in writers:
            writer.close()
    divergences = tuple(c.divergence for c in comparers if c.divergence is not None)
    return LockstepResult(
        workload=workload.name, left=names[0], right=names[1], steps=step,
        divergences=divergences, error=error, error_detail=detail,
        seconds=time.monotonic() - started,
        left_series=Series.of(records[0]), right_series=Series.of(records[1]),
    )
