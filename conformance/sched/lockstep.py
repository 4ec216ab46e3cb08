"""Run two systems on one workload in lockstep and compare every step at every level.

Both drivers advance one step at a time; each step's pair of records goes to one comparer per
level. Comparing at all three levels in one run is what lets a report say which level a
workload reaches (and where each stricter level first broke) without running it three times.
The run stops early once even the `schedule` level has diverged: past that point the two
systems are running different schedules and nothing more can be learned.

A system that raises (an impl assertion, an integrity check) ends the run with an error; an
errored workload reaches no level. Both sides raising at the same step on the same release
check (an upstream assertion the twin reproduces, `failures`) is agreement instead: the result
says so in `same_failure`. A stall (`liveness.Stalled`) is caught per side, because
upstream stalls too (a request larger than the KV pool but within max_model_len is never
admitted): both sides stalling at the same step, for the same reason, with the same queues is
agreement (the result keeps a `StallReport` and no error); one side stalling alone, or the two
stalling differently, is an error that names the side and shows both systems' queues and
block counts.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from conformance.sched import failures
from conformance.sched.activity import Activity
from conformance.sched.compare import LEVELS, Comparer, Divergence
from conformance.sched.driver import Driver, Step
from conformance.sched.liveness import Stalled, describe_state
from conformance.sched.record import StepRecord
from conformance.sched.trace import TraceWriter
from conformance.systems.protocol import System, SystemFactory, SystemState, close_system
from conformance.systems.registry import build_reason
from conformance.systems.remote.proxy import WorkerDied
from workloads.model import EngineConfig, Workload

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
    # The CPU offload tier's pool (seed 003's three numbers) and the step's transfers; empty
    # without a connector.
    cpu_active: tuple[int, ...] = ()
    cpu_cached: tuple[int, ...] = ()
    cpu_empty: tuple[int, ...] = ()
    loaded_blocks: tuple[int, ...] = ()
    stored_blocks: tuple[int, ...] = ()

    @staticmethod
    def of(records: list[StepRecord]) -> Series:
        tiers = [r.cpu_blocks for r in records]
        has_cpu = any(t is not None for t in tiers)
        transfers = [r.transfers for r in records]
        return Series(
            tuple(r.blocks.active for r in records), tuple(r.blocks.cached for r in records),
            tuple(r.blocks.empty for r in records), tuple(r.num_running for r in records),
            tuple(r.num_waiting for r in records),
            *((tuple(0 if t is None else t.active for t in tiers),
               tuple(0 if t is None else t.cached for t in tiers),
               tuple(0 if t is None else t.empty for t in tiers),
               tuple(0 if t is None else t.num_loaded_blocks for t in transfers),
               tuple(0 if t is None else t.num_stored_blocks for t in transfers))
              if has_cpu else ()),
        )


@dataclass(frozen=True, slots=True)
class StallReport:
    """How a run stalled: each side's `Stalled` (None: that side did not stall) and each
    side's state at that point (for a side that did not stall, read when the other did)."""

    left: Stalled | None
    right: Stalled | None
    left_state: SystemState
    right_state: SystemState

    @property
    def agreed(self) -> bool:
        return self.left is not None and self.right is not None and self.left.same_as(self.right)

    @property
    def step(self) -> int:
        return next(s.step for s in (self.left, self.right) if s is not None)

    @property
    def side(self) -> str:
        """`both`, `left` or `right`: who stalled."""
        if self.left is not None and self.right is not None:
            return "both"
        return "left" if self.left is not None else "right"

    def summary(self, left: str, right: str) -> str:
        """`both stalled at step N: ...` or `left system X stalled at step N: ...`, with
        both systems' queues and block counts."""
        first = self.left if self.left is not None else self.right
        assert first is not None
        states = (f"{left}: {describe_state(self.left_state)}; "
                  f"{right}: {describe_state(self.right_state)}")
        if self.agreed:
            return f"both stalled at step {first.step} ({first.reason}): {first.detail}; {states}"
        if self.side == "both":
            assert self.left is not None and self.right is not None
            return (f"both stalled, differently: {left} at step {self.left.step} "
                    f"({self.left.reason}), {right} at step {self.right.step} "
                    f"({self.right.reason}); {states}")
        name = left if self.side == "left" else right
        return (f"{self.side} system {name} stalled at step {first.step} ({first.reason}): "
                f"{first.detail}; {states}")


@dataclass(frozen=True, slots=True)
class DivergenceState:
    """Both systems' state right after the step where `level` first diverged (read then, once
    per level: the block timeline's last column, with the free queue's head and the cached
    block ids that the records do not carry)."""

    level: str
    step: int
    left: SystemState
    right: SystemState


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
    stall: StallReport | None = None
    activity: Activity = Activity(0, 0, 0, 0, 0, 0)
    """What the left system's run exercised (preemptions, evictions, padding, hits)."""
    divergence_states: tuple[DivergenceState, ...] = ()
    same_failure: str | None = None
    """Both systems stopped at the same step on the same release check (an upstream bug the
    twin reproduces, `conformance.sched.failures`): agreement, with the steps before compared
    as usual."""
    refused: str | None = None
    """Both systems refused the workload's config when built (each one's error): agreement,
    as a release that rejects a config is behaviour the twin must reproduce."""
    unbuilt: str | None = None
    """One system could not be built for the workload's config ("SYSTEM could not be built:
    REASON"): an error of the setup, never a behaviour difference, and nothing was compared."""

    @property
    def level_reached(self) -> str | None:
        """The strictest level with no divergence (None: not even `schedule`, or an error)."""
        if self.error is not None or self.unbuilt is not None:
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
    stall_patience: int | None = None,
) -> LockstepResult:
    started = time.monotonic()
    comparers = [Comparer(workload.name, level, context) for level in LEVELS]
    records: tuple[list[StepRecord], list[StepRecord]] = ([], [])
    names = [getattr(left, "label", "left"), getattr(right, "label", "right")]
    writers: list[TraceWriter] = []
    error: str | None = None
    detail: str | None = None
    step = 0
    side = 0
    stall: StallReport | None = None
    same_failure: str | None = None
    also_raised: Exception | None = None  # the other side's error, when both raised alike
    systems: list[System] = []
    snapped: dict[str, DivergenceState] = {}
    try:
        built = [build_or_error(factory, workload.config) for factory in (left, right)]
        if isinstance(built[0], Exception) and isinstance(built[1], Exception):
            return refused_by_both(workload.name, names, built[0], built[1], started)
        for side, product in enumerate(built):
            if isinstance(product, Exception):
                return unbuilt_result(workload.name, names, side, product, started)
            systems.append(product)
            names[side] = product.name
        none_hashes = [getattr(s, "none_hash", None) for s in systems]
        for comparer in comparers:
            comparer.feed_setting("none_hash", *none_hashes)
        drivers = [Driver(s, workload, integrity_every=integrity_every, max_steps=max_steps,
                          snapshot_before=trace_dir is not None, stall_patience=stall_patience)
                   for s in systems]
        if trace_dir is not None:
            writers = [TraceWriter(trace_dir / trace_name(workload.name, label, s.name),
                                   s.name, workload.name)
                       for label, s in zip(("left", "right"), systems, strict=True)]
        streams: list[Iterator[Step]] = [d.steps() for d in drivers]
        grace = -1  # steps still to run after `schedule` diverged (-1: it has not)
        while grace != 0:
            pair: list[Step | None] = []
            stalls: list[Stalled | None] = []
            raised: list[Exception | None] = []
            for stream in streams:
                got, stalled, err = _advance(stream)
                pair.append(got)
                stalls.append(stalled)
                raised.append(err if grace < 0 else None)  # past the divergence only a
                # stall is news
            if raised[0] is not None or raised[1] is not None:
                same_failure = failures.same_failure(raised[0], raised[1])
                if same_failure is None:
                    side = 0 if raised[0] is not None else 1  # named in the error message
                    also_raised = raised[1 - side]
                    raise _first(raised)
                same_failure = failures.describe(same_failure, step)
                break
            if stalls[0] is not None or stalls[1] is not None:
                stall = _stall_report(stalls, systems)
                if not stall.agreed:
                    error = stall.summary(names[0], names[1])
                break
            if pair[0] is None and pair[1] is None:
                break
            if grace > 0:
                grace -= 1
                continue
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
                divergence = comparer.divergence
                if divergence is not None and divergence.level not in snapped:
                    snapped[divergence.level] = DivergenceState(
                        divergence.level, divergence.step, systems[0].state(),
                        systems[1].state())
            step += 1
            if comparers[-1].divergence is not None:
                # The schedules parted. One side going idle right there is the usual shape
                # of a stall: run a little longer, so the report can say "stalled".
                grace = drivers[0].liveness.patience + 1
            if progress is not None and step % progress_every == 0:
                progress(workload.name, step)
    except Exception as err:  # a system failed: report it, do not crash the whole suite
        error = f"{('left', 'right')[side]} system {names[side]} raised " \
                f"{type(err).__name__} at step {step}: {err}"
        if also_raised is not None:
            error += (f"; the {('left', 'right')[1 - side]} system raised "
                      f"{type(also_raised).__name__} at that step too: {also_raised}")
        detail = traceback.format_exc(limit=8)
    finally:
        for writer in writers:
            writer.close()
        for system in systems:
            close_system(system)  # optional in the protocol: frees a worker's remote system
    divergences = tuple(c.divergence for c in comparers if c.divergence is not None)
    return LockstepResult(
        workload=workload.name, left=names[0], right=names[1], steps=step,
        divergences=divergences, error=error, error_detail=detail,
        seconds=time.monotonic() - started,
        left_series=Series.of(records[0]), right_series=Series.of(records[1]), stall=stall,
        activity=Activity.of(records[0]), divergence_states=tuple(snapped.values()),
        same_failure=same_failure,
    )


def _advance(stream: Iterator[Step]) -> tuple[Step | None, Stalled | None, Exception | None]:
    """One side's next step, or how it stopped: finished (all None), stalled, or raised."""
    try:
        return next(stream, None), None, None
    except Stalled as stalled:
        return None, stalled, None
    except Exception as err:
        return None, None, err


def _first(raised: list[Exception | None]) -> Exception:
    return next(err for err in raised if err is not None)


def build_or_error(factory: SystemFactory, config: EngineConfig) -> System | Exception:
    """The factory's system, or what it raised (the caller decides whether that is an error:
    it is not when the other side refuses the config too). A worker that died is never a
    refusal."""
    try:
        return factory(config)
    except WorkerDied:
        raise
    except Exception as err:
        return err


def refused_by_both(workload: str, names: list[str], left: Exception, right: Exception,
                     started: float) -> LockstepResult:
    refusal = (f"both systems refuse the config: left {type(left).__name__}: {left}; "
               f"right {type(right).__name__}: {right}")
    empty = Series.of([])
    return LockstepResult(workload=workload, left=names[0], right=names[1], steps=0,
                          divergences=(), error=None, error_detail=None,
                          seconds=time.monotonic() - started, left_series=empty,
                          right_series=empty, refused=refusal)


def unbuilt_result(workload: str, names: list[str], side: int, err: Exception,
             started: float) -> LockstepResult:
    empty = Series.of([])
    return LockstepResult(workload=workload, left=names[0], right=names[1], steps=0,
                          divergences=(), error=None, error_detail=None,
                          seconds=time.monotonic() - started, left_series=empty,
                          right_series=empty,
                          unbuilt=f"{names[side]} could not be built: {build_reason(err)}")


def _stall_report(stalls: list[Stalled | None], systems: list[System]) -> StallReport:
    """The side that did not stall is still alive: its state is read now, at the same step."""
    states = [s.state if s is not None else system.state()
              for s, system in zip(stalls, systems, strict=True)]
    return StallReport(stalls[0], stalls[1], states[0], states[1])
