"""Drift: every difference between two systems on a set of workloads, grouped by field class.

`vtwin conform` stops at the first difference, so one cosmetic field that differs from step 0
(``num_common_prefix_blocks``: filled by vLLM 0.19, empty since 0.32) hides every change behind
it. Drift runs each system on its own to the end of the workload (both drivers advance one
step at a time, so memory stays flat, but neither waits on the other's verdict) and compares
each step's pair of records field by field, never stopping. Every difference lands in a
*class*: its record field (``prefix_cache.queries``, ``blocks.cached`` and
``scheduler_stats.*`` are split by key). Per class: the workloads, the first step in each,
how many steps differ, one example (path and both values), and hints derived from the
evidence (a block reused on one side where the other takes a fresh one; a chunk cut at the
workload's ``long_prefill_token_threshold``).

Kinds: ``schedule`` (what runs: tokens, queues, preemptions, finishes, outputs),
``kv-cache`` (which blocks, hashes and events), ``reported`` (numbers the scheduler reports
and never acts on: stats, ``num_common_prefix_blocks``). A ``reported`` class is cosmetic; the
other two are behavioural. Once the schedules part in a workload every later step differs
somewhere; a class that first shows after that step is marked ``downstream`` there. Per
workload, ``first`` is the class `vtwin conform` would have stopped at and ``hidden`` what it
would never have shown. `--ignore-field F` drops a field from the comparison (counted under
``ignored``), so the first difference of what is left shows (`conformance.cli.drift` is the
command).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance.drift.classes import (
    OPTIONAL_FIELDS,
    SCHEDULE_KINDS,
    Hinter,
    classes_of,
    kind_of,
)
from conformance.sched.driver import Driver, Step
from conformance.sched.liveness import Stalled
from conformance.systems.protocol import SystemFactory, close_system
from conformance.systems.registry import build_reason
from workloads.model import Workload

Progress = Callable[[str, int], None]


@dataclass(slots=True)
class Occurrence:
    """One class in one workload: first step, steps that differ, the first example, and
    whether it first showed after the schedules had parted (`downstream`)."""

    first_step: int
    example: dict[str, Any]
    steps: int = 0
    downstream: bool = False


@dataclass(slots=True)
class DriftClass:
    name: str
    kind: str
    occurrences: dict[str, Occurrence] = field(default_factory=dict)
    hints: Counter[str] = field(default_factory=Counter)

    @property
    def cosmetic(self) -> bool:
        return self.kind == "reported"

    def to_json(self) -> dict[str, Any]:
        first_workload, first = min(self.occurrences.items(),
                                    key=lambda kv: (kv[1].downstream, kv[1].first_step))
        return {
            "class": self.name, "kind": self.kind,
            "effect": "cosmetic" if self.cosmetic else "behavioural",
            "workloads": len(self.occurrences),
            "steps": sum(o.steps for o in self.occurrences.values()),
            "root_in": sorted(w for w, o in self.occurrences.items() if not o.downstream),
            "downstream_in": sorted(w for w, o in self.occurrences.items() if o.downstream),
            "hints": [{"hint": h, "steps": n} for h, n in self.hints.most_common()],
            "example": {"workload": first_workload, **first.example},
            "per_workload": {w: {"steps": o.steps, "downstream": o.downstream, **o.example}
                             for w, o in self.occurrences.items()},
        }


@dataclass(slots=True)
class SideRun:
    """How one side's run of a workload went."""

    name: str
    end: str = "finished"
    step: int = 0
    detail: str = ""
    seconds: float = 0.0
    steps: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"system": self.name, "end": self.end, "step": self.step, "detail": self.detail,
                "steps": self.steps, "seconds": round(self.seconds, 4),
                "ms_per_step": round(1000 * self.seconds / max(self.steps, 1), 4)}


@dataclass(slots=True)
class WorkloadDrift:
    workload: str
    left: SideRun
    right: SideRun
    first: str | None = None
    first_step: int | None = None
    parted_at: int | None = None
    classes: list[str] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    unbuilt: str | None = None
    """"SYSTEM could not be built: REASON" when one side could not be built (nothing ran; a
    setup error, never a class); both refusing the config is agreement and leaves it None."""
    refused: str | None = None
    """Both sides refused the workload's config: agreement, nothing to compare."""

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "unbuilt": self.unbuilt, "refused": self.refused,
                "left": self.left.to_json(),
                "right": self.right.to_json(), "first": self.first,
                "first_step": self.first_step, "schedule_parted_at": self.parted_at,
                "classes": self.classes,
                "hidden": [c for c in self.classes if c != self.first],
                "ignored": dict(self.ignored)}


class Differ:
    """Compares one workload's record pairs, step after step, into the run's classes."""

    def __init__(self, workload: Workload, found: dict[str, DriftClass],
                 ignore: frozenset[str], result: WorkloadDrift) -> None:
        self.workload = workload
        self.found = found
        self.ignore = ignore
        self.result = result
        self.hinter = Hinter(workload.config)

    def feed(self, a: dict[str, Any], b: dict[str, Any]) -> None:
        step = a["step"]
        self.hinter.at(a, b)
        for name in a:
            if name == "step" or a[name] == b[name]:
                continue
            if name in OPTIONAL_FIELDS and (a[name] is None or b[name] is None):
                continue
            if name in self.ignore:
                self.result.ignored[name] += 1
                continue
            for cls, path, x, y in classes_of(name, a[name], b[name]):
                self.note(cls, step, path, x, y, self.hinter.hint(name, path, x, y))
        self.hinter.after(a, b)

    def note(self, cls: str, step: int, path: str, x: Any, y: Any, hint: str | None) -> None:
        result = self.result
        kind = kind_of(cls)
        if result.first_step is None:
            result.first, result.first_step = cls, step
        if kind in SCHEDULE_KINDS and result.parted_at is None:
            result.parted_at = step
        # Past the step where the schedules parted, every field differs for that reason alone
        # (at that step itself, all but the schedule's own fields).
        parted = result.parted_at
        downstream = parted is not None and (step > parted or
                                             (step == parted and kind not in SCHEDULE_KINDS))
        entry = self.found.setdefault(cls, DriftClass(cls, kind))
        occurrence = entry.occurrences.get(self.workload.name)
        if occurrence is None:
            example = {"step": step, "path": path, "left": x, "right": y}
            if hint is not None and not downstream:
                example["hint"] = hint
            occurrence = Occurrence(step, example, downstream=downstream)
            entry.occurrences[self.workload.name] = occurrence
            result.classes.append(cls)
        occurrence.steps += 1
        if hint is not None and not downstream:
            entry.hints[hint] += 1


def _advance(side: SideRun, stream: Iterator[Step]) -> Step | None:
    started = time.perf_counter()
    try:
        got = next(stream, None)
        if got is None:
            side.end = "finished"
        else:
            side.step, side.steps = got.record.step, side.steps + 1
        return got
    except Stalled as stalled:
        side.end, side.step, side.detail = "stalled", stalled.step, stalled.reason
    except Exception as err:
        side.end, side.detail = "error", f"{type(err).__name__}: {err}"[:300]
    finally:
        side.seconds += time.perf_counter() - started
    return None


def drift_workload(workload: Workload, factories: tuple[SystemFactory, SystemFactory],
                   found: dict[str, DriftClass], *, ignore: Iterable[str] = (),
                   integrity_every: int = 0, max_steps: int | None = None,
                   progress: Progress | None = None, progress_every: int = 50) -> WorkloadDrift:
    """Both systems on `workload`, each to its own end; every difference goes into `found`."""
    sides = (SideRun("left"), SideRun("right"))
    result = WorkloadDrift(workload.name, *sides)
    differ = Differ(workload, found, frozenset(ignore), result)
    streams: list[Iterator[Step] | None] = [None, None]
    systems: list[Any] = []
    try:
        built = [_build(side, factory, workload) for side, factory in
                 zip(sides, factories, strict=True)]
        failed = [(i, b) for i, b in enumerate(built) if isinstance(b, BaseException)]
        if failed:
            for product in built:
                if not isinstance(product, BaseException):
                    close_system(product)
            if len(failed) == 2:
                result.refused = ("both systems refuse the config: " + "; ".join(
                    f"{_label(factories[i], sides[i].name)}: {build_reason(err)}"
                    for i, err in failed))
            else:
                index, err = failed[0]
                result.unbuilt = (f"{_label(factories[index], sides[index].name)} could not "
                                  f"be built: {build_reason(err)}")
            return result
        for index, system in enumerate(built):
            systems.append(system)
            sides[index].name = system.name
            streams[index] = Driver(system, workload, integrity_every=integrity_every,
                                    max_steps=max_steps, snapshot_before=False).steps()
        hashes = [getattr(s, "none_hash", None) for s in systems]
        if len(systems) == 2 and hashes[0] != hashes[1] and "none_hash" not in differ.ignore:
            differ.note("none_hash", 0, "none_hash", hashes[0], hashes[1], None)
        count = 0
        while any(s is not None for s in streams):
            pair = [None if s is None else _advance(sides[i], s) for i, s in enumerate(streams)]
            streams = [s if got is not None else None for s, got in zip(streams, pair, strict=True)]
            if pair[0] is not None and pair[1] is not None:
                differ.feed(pair[0].record.to_json(), pair[1].record.to_json())
            count += 1
            if progress is not None and count % progress_every == 0:
                progress(workload.name, count)
    finally:
        for system in systems:
            close_system(system)
    _compare_ends(differ, sides)
    return result


def _build(side: SideRun, factory: SystemFactory, workload: Workload) -> Any:
    """The side's system for `workload`, or what its factory raised (timed on the side)."""
    started = time.perf_counter()
    try:
        return factory(workload.config)
    except Exception as err:
        return err
    finally:
        side.seconds += time.perf_counter() - started


def _label(factory: SystemFactory, default: str) -> str:
    label = getattr(factory, "label", None)
    return label if isinstance(label, str) else default


def _compare_ends(differ: Differ, sides: tuple[SideRun, SideRun]) -> None:
    left, right = sides
    if (left.end, left.step, left.detail) != (right.end, right.step, right.detail):
        describe = [f"{s.end} after step {s.step}" + (f" ({s.detail})" if s.detail else "")
                    for s in sides]
        differ.note("end", min(left.step, right.step), "end", describe[0], describe[1], None)
