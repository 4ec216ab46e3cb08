"""Running a P/D pair (`workloads.pd_pair`): a prefill and a decode instance of one system
behind the harness's router, compared instance by instance with another system's pair.

Each side builds two systems from its factory (the prefill instance on the workload's config,
the decode instance on the pair's), gives each a driver and couples them: one `PairWorker`
plays the transfers between them, and the router sends a request on to the decode instance
when the prefill instance's output hands it on. The two instances step together, prefill
first; a step counts for both, so their records line up by step. The decode instance keeps
stepping while the prefill one may still send it requests, and each instance counts as busy
(not stalled) while the other made progress within the stall patience, so a pair stalls only
when neither moves.

A side's run is taken whole, then each instance's records go through the comparer as recorded
runs do (`compare_recorded`): one `LockstepResult` for the prefill instances
(`NAME@prefill`), one for the decode instances (`NAME@decode`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from conformance.sched.activity import Activity
from conformance.sched.arrivals import Arrivals
from conformance.sched.driver import Driver, Step, default_max_steps
from conformance.sched.failures import error_end
from conformance.sched.liveness import Stalled
from conformance.sched.lockstep import (
    LockstepResult,
    StallReport,
    build_or_error,
    refused_by_both,
    run_lockstep,
    trace_name,
    unbuilt_result,
)
from conformance.sched.pd_pair_worker import PairWorker
from conformance.sched.record import StepRecord
from conformance.sched.recorded import Recorded, compare_recorded
from conformance.sched.trace import TraceWriter
from conformance.systems.protocol import (
    BlockCounts,
    System,
    SystemFactory,
    SystemState,
    close_system,
)
from workloads.model import Workload
from workloads.pd_pair import decode_side, prefill_side

INSTANCES = ("prefill", "decode")
_NO_STATE = SystemState((), (), BlockCounts(0, 0, 0))  # a side that did not stall


@dataclass(frozen=True, slots=True)
class PairResult:
    """Both instances' comparisons (each a `LockstepResult` named `WORKLOAD@INSTANCE`)."""

    prefill: LockstepResult
    decode: LockstepResult

    @property
    def results(self) -> tuple[LockstepResult, LockstepResult]:
        return self.prefill, self.decode


@dataclass(slots=True)
class _Instance:
    kind: str  # "prefill" or "decode"
    system: System | None = None
    name: str = ""  # the system's name, once it ran
    records: list[StepRecord] | None = None
    end: dict[str, Any] | None = None
    stalled: Stalled | None = None
    last_progress: int = 0
    trace: TraceWriter | None = None


class _RoutedArrivals(Arrivals):
    """The decode instance's arrivals: only what the router sends, and more may come while
    the prefill instance still runs."""

    def __init__(self, workload: Workload, prefill: _Instance) -> None:
        super().__init__(replace(workload, requests=()))
        self._prefill = prefill

    def __bool__(self) -> bool:
        return super().__bool__() or self._prefill.end is None


def run_pd_pair(workload: Workload, left: SystemFactory, right: SystemFactory, *,
                integrity_every: int = 1, max_steps: int | None = None,
                trace_dir: Path | None = None) -> PairResult:
    """Both sides' pairs run whole, then compared instance by instance. A config either side
    refuses for either instance is judged for the pair as `run_lockstep` judges one: refused
    by both (agreement), or one side unbuilt. `trace_dir`: each instance's trace of each side
    is written there, named as `run_lockstep` names them (`WORKLOAD@INSTANCE`)."""
    started = time.monotonic()
    configs = (prefill_side(workload).config, decode_side(workload).config)
    built = [[build_or_error(factory, config) for config in configs] for factory in (left, right)]
    failed = [next((s for s in side if isinstance(s, Exception)), None) for side in built]
    if failed != [None, None]:
        return _not_run(workload, built, failed, started)
    sides = []
    for label, (prefill_system, decode_system) in zip(("left", "right"), built, strict=True):
        assert not isinstance(prefill_system, Exception)
        assert not isinstance(decode_system, Exception)
        prefill, decode = _Instance("prefill", prefill_system), _Instance("decode", decode_system)
        if trace_dir is not None:
            for part in (prefill, decode):
                assert part.system is not None
                traced = f"{workload.name}@{part.kind}"
                part.trace = TraceWriter(trace_dir / trace_name(traced, label, part.system.name),
                                         part.system.name, traced)
        sides.append(_run_side(workload, (prefill, decode), integrity_every, max_steps))
    seconds = time.monotonic() - started
    results = []
    for index, instance in enumerate(INSTANCES):
        runs = [side[index] for side in sides]
        recorded = [Recorded(run.name, f"{workload.name}@{instance}",
                             None if run.system is None else run.system.none_hash,
                             tuple(run.records or ()), run.end or {"end": "finished"})
                    for run in runs]
        result = compare_recorded(recorded[0], recorded[1])
        stalls = [run.stalled for run in runs]
        results.append(replace(
            result, seconds=seconds, activity=Activity.of(runs[0].records or []),
            stall=None if stalls == [None, None] else StallReport(
                stalls[0], stalls[1], *(_NO_STATE if s is None else s.state for s in stalls))))
    return PairResult(results[0], results[1])


def _not_run(workload: Workload, built: list[list[System | Exception]],
             failed: list[Exception | None], started: float) -> PairResult:
    names = [next((s.name for s in side if not isinstance(s, Exception)), side_name)
             for side, side_name in zip(built, ("left", "right"), strict=True)]
    for side in built:
        for system in side:
            if not isinstance(system, Exception):
                close_system(system)
    results = []
    for instance in INSTANCES:
        name = f"{workload.name}@{instance}"
        if failed[0] is not None and failed[1] is not None:
            results.append(refused_by_both(name, names, failed[0], failed[1], started))
        else:
            index = 0 if failed[0] is not None else 1
            error = failed[index]
            assert error is not None
            results.append(unbuilt_result(name, names, index, error, started))
    return PairResult(results[0], results[1])


def _run_side(workload: Workload, instances: tuple[_Instance, _Instance], integrity_every: int,
              max_steps: int | None) -> tuple[_Instance, _Instance]:
    """One system's pair, run to its end; an instance's error or stall ends its records."""
    prefill, decode = instances
    prefill_workload, decode_workload = prefill_side(workload), decode_side(workload)
    cap = default_max_steps(workload) if max_steps is None else max_steps
    traced = prefill.trace is not None
    try:
        assert prefill.system is not None and decode.system is not None
        drivers = (Driver(prefill.system, prefill_workload, integrity_every=integrity_every,
                          max_steps=cap, snapshot_before=traced),
                   Driver(decode.system, decode_workload, integrity_every=integrity_every,
                          max_steps=cap, snapshot_before=traced))
        worker = PairWorker(decode_workload)
        drivers[0].transfers, drivers[1].transfers = worker.prefill, worker.decode
        drivers[1].arrivals = _RoutedArrivals(decode_workload, prefill)
        _couple(drivers, (prefill, decode))
        _step_together(workload, drivers, (prefill, decode), worker)
    finally:
        for instance in (prefill, decode):
            if instance.trace is not None:
                instance.trace.close()
            if instance.system is not None:
                close_system(instance.system)
    for instance in (prefill, decode):
        if instance.system is not None:
            instance.name = instance.system.name
    return prefill, decode


def _couple(drivers: tuple[Driver, Driver], instances: tuple[_Instance, _Instance]) -> None:
    """Each instance is busy while the other progressed within the stall patience."""
    for driver, peer in zip(drivers, reversed(instances), strict=True):
        driver.waits_on_peer = _peer_moving(peer, driver.liveness.patience)


def _peer_moving(peer: _Instance, patience: int) -> Callable[[], bool]:
    def moving() -> bool:
        return peer.end is None and len(peer.records or ()) - peer.last_progress <= patience
    return moving


def _step_together(workload: Workload, drivers: tuple[Driver, Driver],
                   instances: tuple[_Instance, _Instance], worker: PairWorker) -> None:
    streams: list[Iterator[Step] | None] = [d.steps() for d in drivers]
    for instance in instances:
        instance.records = []
    pair = workload.pd_pair
    assert pair is not None
    aborted = {a.request_id: a.step for a in workload.aborts}
    decode_requests = {r.request_id: r for r in drivers[1].workload.requests}
    while any(s is not None for s in streams):
        for index, (stream, instance) in enumerate(zip(streams, instances, strict=True)):
            if stream is None:
                continue
            step = _advance(stream, instance)
            if step is None:
                streams[index] = None
                continue
            record = step.record
            if _progressed(record):
                instance.last_progress = len(instance.records or ())
            if index == 0:
                _route(record, drivers[1].arrivals, decode_requests, aborted,
                       pair.router_latency_steps, worker)


def _advance(stream: Iterator[Step], instance: _Instance) -> Step | None:
    assert instance.records is not None
    try:
        step = next(stream)
    except StopIteration:
        instance.end = {"end": "finished"}
        return None
    except Stalled as stalled:
        instance.end = {"end": "stalled", "step": stalled.step, "reason": stalled.reason,
                        "detail": stalled.detail}
        instance.stalled = stalled
        return None
    except Exception as err:  # the instance's own error ends its run, as a recording's does
        instance.end = error_end(err, len(instance.records))
        return None
    instance.records.append(step.record)
    if instance.trace is not None:
        instance.trace.write(step)
    return step


def _progressed(record: StepRecord) -> bool:
    report = record.connector_report
    return bool(record.total_num_scheduled_tokens or record.outputs or (
        report is not None and (report.finished_loads or report.finished_sends)))


def _route(record: StepRecord, arrivals: Arrivals, requests: dict[str, Any],
           aborted: dict[str, int], latency: int, worker: PairWorker) -> None:
    """The router: a prefill that handed on what to read goes to the decode instance, unless
    the client aborted it before it would arrive (the prefill side then frees at once)."""
    for output in record.outputs:
        if output.handed_on is None:
            continue
        arrival = record.step + latency
        abort = aborted.get(output.req_id, arrival)
        if abort < arrival:  # the prefill side frees once the router drops it
            worker.release(output.req_id, abort)
            continue
        arrivals.add(arrival, replace(requests[output.req_id], arrival_step=arrival))


def run_instances(workload: Workload, left: SystemFactory, right: SystemFactory, *,
                  integrity_every: int = 1, **lockstep: Any) -> tuple[LockstepResult, ...]:
    """Every instance's comparison: the pair's two for a P/D pair workload, else the one
    `run_lockstep` gives (`lockstep`: its other options)."""
    if workload.pd_pair is not None:
        return run_pd_pair(workload, left, right, integrity_every=integrity_every,
                           max_steps=lockstep.get("max_steps"),
                           trace_dir=lockstep.get("trace_dir")).results
    return (run_lockstep(workload, left, right, integrity_every=integrity_every, **lockstep),)
