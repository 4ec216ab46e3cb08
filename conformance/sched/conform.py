"""`vtwin conform` / `vtwin gate` without the argument parsing: run workloads, judge, report.

For each workload: run the two systems in lockstep (`lockstep.run_lockstep`), then judge it at
the requested level: `passed` (no divergence at that level), `known` (its first divergence is
waived by a known-divergence entry), `failed`, or `error` (a system raised, or one side stalled
alone or differently). Both sides stalling identically (same step, reason and queues, e.g. a
request the pool can never hold, on which upstream hangs too) is agreement: the verdict stays
`passed` at the levels reached so far and the outcome carries a `stalled` note. The run
is ok when every workload passed or is known and no known-divergence entry went stale.
Progress goes to stderr, one line per workload and one every `progress_every` steps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from conformance.sched.compare import Divergence, check_level
from conformance.sched.divergences import KnownDivergence, find_waiver, stale_entries
from conformance.sched.lockstep import LockstepResult, run_lockstep
from conformance.sched.suite import resolve_workload
from conformance.sched.system import resolve_system
from workloads.model import Workload

VERDICTS = ("passed", "known", "failed", "error")


@dataclass(frozen=True, slots=True)
class WorkloadOutcome:
    workload: str
    description: str
    num_requests: int
    level: str
    verdict: str
    result: LockstepResult
    waiver: KnownDivergence | None
    source: Workload | None = field(default=None, compare=False, repr=False)
    """The workload itself, for `--emit-regression` (None when built by hand)."""

    @property
    def divergence(self) -> Divergence | None:
        """The divergence that decided the verdict (at the requested level), if any."""
        return self.result.divergence_at(self.level)

    @property
    def stalled(self) -> str | None:
        """`both stalled at step N: ...` / `left system X stalled at step N: ...`, or None."""
        stall = self.result.stall
        return None if stall is None else stall.summary(self.result.left, self.result.right)


@dataclass(frozen=True, slots=True)
class ConformRun:
    left: str
    right: str
    level: str
    outcomes: tuple[WorkloadOutcome, ...]
    stale: tuple[KnownDivergence, ...]

    @property
    def ok(self) -> bool:
        return not self.stale and all(o.verdict in ("passed", "known") for o in self.outcomes)


def judge(result: LockstepResult, level: str,
          known: Sequence[KnownDivergence]) -> tuple[str, KnownDivergence | None]:
    if result.error is not None:
        return "error", None
    divergence = result.divergence_at(level)
    if divergence is None:
        return "passed", None
    waiver = find_waiver(known, divergence)
    return ("known", waiver) if waiver is not None else ("failed", None)


def run_conform(
    workload_names: Sequence[str],
    *,
    system: str = "impl",
    against: str = "upstream",
    level: str = "exact",
    known: Sequence[KnownDivergence] = (),
    trace_dir: Path | None = None,
    integrity_every: int | None = None,
    max_steps: int | None = None,
    progress_every: int = 500,
    stream: TextIO | None = None,
) -> ConformRun:
    """Run every workload (suite names, bundled names or files) and judge it at `level`."""
    out = sys.stderr if stream is None else stream
    check_level(level)
    left, right = resolve_system(system), resolve_system(against)
    resolved: list[tuple[Workload, int]] = [resolve_workload(n) for n in workload_names]
    outcomes: list[WorkloadOutcome] = []
    total = len(resolved)
    left_name, right_name = system, against
    for index, (workload, every) in enumerate(resolved, 1):
        print(f"vtwin conform: [{index}/{total}] {workload.name}: "
              f"{len(workload.requests)} requests ...", file=out, flush=True)
        result = run_lockstep(
            workload, left, right, trace_dir=trace_dir, max_steps=max_steps,
            integrity_every=every if integrity_every is None else integrity_every,
            progress_every=progress_every,
            progress=lambda name, step: print(f"vtwin conform:     {name}: step {step}",
                                              file=out, flush=True),
        )
        left_name, right_name = result.left, result.right
        verdict, waiver = judge(result, level, known)
        outcomes.append(WorkloadOutcome(workload.name, workload.description,
                                        len(workload.requests), level, verdict, result, waiver,
                                        workload))
        print(f"vtwin conform: [{index}/{total}] {_line(outcomes[-1])}", file=out, flush=True)
    used = [o.waiver for o in outcomes if o.waiver is not None]
    stale = stale_entries(known, level, [o.workload for o in outcomes], used)
    for entry in stale:
        print(f"vtwin conform: stale known divergence {entry.id!r} (level {entry.level}): "
              "it matched nothing; delete it", file=out, flush=True)
    return ConformRun(left_name, right_name, level, tuple(outcomes), tuple(stale))


def _line(outcome: WorkloadOutcome) -> str:
    r = outcome.result
    head = (f"{outcome.workload}: {r.steps} steps, {outcome.verdict} at {outcome.level} "
            f"(reached: {r.level_reached or 'none'}, {r.seconds:.1f}s)")
    if outcome.verdict == "error":
        return f"{head}: {r.error}"
    if outcome.stalled is not None:
        head += f"; {outcome.stalled}"
    divergence = outcome.divergence
    if divergence is not None:
        head += f": step {divergence.step}, field {divergence.field}"
        if outcome.waiver is not None:
            head += f" (known: {outcome.waiver.reason})"
    return head
