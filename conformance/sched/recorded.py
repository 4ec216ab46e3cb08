"""Recorded runs: one system alone on a workload, its trace written to a file (`record_run`),
read back (`read_recorded`) and compared with another recording offline (`compare_recorded`)
through the lockstep comparer. What `vtwin record` and `vtwin compare` run, and what campaigns
compare."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.sched.compare import LEVELS, Comparer
from conformance.sched.driver import Driver
from conformance.sched.failures import describe, error_end, same_failed_ends
from conformance.sched.liveness import Stalled
from conformance.sched.lockstep import LockstepResult, Series
from conformance.sched.record import StepRecord
from conformance.sched.trace import TRACE_FORMAT, TraceWriter, dumps_line, read_trace
from conformance.systems.protocol import close_system
from conformance.systems.registry import build_system, resolve_system
from vtwin.errors import SystemBuildFailed, UserError
from workloads.model import Workload


class RecordWriter(TraceWriter):
    """A trace writer that also writes the settings line and the end line of a recording."""

    def line(self, data: dict[str, Any]) -> None:
        self._file.write(dumps_line(data))


@dataclass(frozen=True, slots=True)
class Recorded:
    """A trace read back: who ran what, the records, and how the run ended."""

    system: str
    workload: str
    none_hash: str | None
    records: tuple[StepRecord, ...]
    end: dict[str, Any]


def read_recorded(path: Path) -> Recorded:
    if not path.is_file():
        raise UserError(f"{path}: no such trace file")
    try:
        lines = read_trace(path)
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: not a trace ({err})") from None
    if not lines or lines[0].get("format") != TRACE_FORMAT:
        raise UserError(f"{path}: not a trace (first line should name format {TRACE_FORMAT})")
    header, settings, end = lines[0], {}, {}
    records = []
    for number, line in enumerate(lines[1:], 2):
        if "settings" in line:
            settings = line["settings"]
        elif "end" in line:
            end = line
        elif "after" in line:
            try:
                records.append(StepRecord.from_json(line["after"]))
            except (KeyError, TypeError) as err:
                raise UserError(f"{path}:{number}: bad step record ({err})") from None
    return Recorded(header["system"], header["workload"], settings.get("none_hash"),
                    tuple(records), end)


def compare_recorded(left: Recorded, right: Recorded) -> LockstepResult:
    """Both runs through one comparer per level, as `run_lockstep` feeds them."""
    comparers = [Comparer(left.workload, level) for level in LEVELS]
    if left.none_hash is not None and right.none_hash is not None:
        for comparer in comparers:
            comparer.feed_setting("none_hash", left.none_hash, right.none_hash)
    steps = 0
    for index in range(max(len(left.records), len(right.records))):
        a = left.records[index] if index < len(left.records) else None
        b = right.records[index] if index < len(right.records) else None
        for comparer in comparers:
            comparer.feed(a, b)
        steps += 1
        if comparers[-1].divergence is not None:
            break
    check = same_failed_ends(left.end, right.end)
    errors = [] if check is not None else [
        f"{side} run ({run.system}) ended with an error: {run.end.get('detail')}"
        for side, run in (("left", left), ("right", right)) if run.end.get("end") == "error"]
    return LockstepResult(
        workload=left.workload, left=left.system, right=right.system, steps=steps,
        divergences=tuple(c.divergence for c in comparers if c.divergence is not None),
        error="; ".join(errors) or None, error_detail=None, seconds=0.0,
        left_series=Series.of(list(left.records)), right_series=Series.of(list(right.records)),
        same_failure=None if check is None else describe(check, int(left.end["step"])))


def record_run(spec: str, workload: Workload, output: Path, *, integrity_every: int,
               max_steps: int | None) -> tuple[str, int, dict[str, Any]]:
    """Run the system `spec` names alone on `workload` to its end, writing its trace to
    `output`: (the system's name, steps, the end line). A system that cannot be built raises
    `UserError` ("SYSTEM could not be built: REASON") before any file is written."""
    factory = resolve_system(spec)
    try:
        system = build_system(factory, spec, workload.config)
    except SystemBuildFailed:
        close_system(factory)  # a worker factory stops its worker
        raise
    driver = Driver(system, workload, integrity_every=integrity_every, max_steps=max_steps,
                    snapshot_before=True)
    writer = RecordWriter(output, system.name, workload.name)
    end: dict[str, Any] = {"end": "finished"}
    steps = 0
    try:
        writer.line({"settings": {
            "none_hash": system.none_hash, "spec": spec, "config": workload.config.to_dict()}})
        for step in driver.steps():
            writer.write(step)
            steps += 1
    except Stalled as stalled:
        end = {"end": "stalled", "step": stalled.step, "reason": stalled.reason,
               "detail": stalled.detail}
    except Exception as err:
        end = error_end(err, steps)
    finally:
        writer.line({**end, "steps": steps})
        writer.close()
        close_system(system)
        close_system(factory)
    return system.name, steps, end
