"""`vtwin conform` / `vtwin gate` without the argument parsing: run workloads, judge, report.

For each workload: run the two systems in lockstep (`lockstep.run_lockstep`), then judge it at
the requested level: `passed` (no divergence at that level), `known` (its first divergence is
waived by a known-divergence entry), `failed`, or `error` (a system raised, or one side stalled
alone or differently). Both sides stalling identically (same step, reason and queues, e.g. a
request the pool can never hold, on which upstream hangs too) is agreement: the verdict stays
`passed` at the levels reached so far and the outcome carries a `stalled` note. The run
is ok when every workload passed or is known and no known-divergence entry went stale.

Progress goes to stderr: a tqdm bar (workloads done, the current one's step) on a terminal,
else one line per workload and one every `progress_every` steps, which is what a CI log wants.
Each system starts once, before the first workload, under lines saying so (`startup.start_systems`:
importing torch and vLLM in process, ~15 s, or starting a worker), and its start-up is
reported apart so the first workload's time is its own. The factories are closed at the end
(a worker factory stops its worker), whatever happened.
Upstream's log records and Python warnings go to a log file (`startup.upstream_logs`) and the
console gets one line counting them, instead of half a screen of block-size and Triton notes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from conformance.sched.compare import Divergence, check_level
from conformance.sched.divergences import KnownDivergence, find_waiver, stale_entries
from conformance.sched.lockstep import LockstepResult, trace_name
from conformance.sched.offload_suite import left_out, with_offload
from conformance.sched.pd_pair import run_instances
from conformance.sched.startup import start_systems, upstream_logs
from conformance.sched.suite import SUITE, resolve_workload
from conformance.systems.protocol import close_system
from conformance.systems.registry import resolve_system
from conformance.systems.specs import follow_release
from workloads.model import EngineConfig, Workload
from workloads.pd_pair import decode_side, prefill_side

VERDICTS = ("passed", "known", "failed", "error", "unbuilt")


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
    covers: str = ""
    """What a suite entry is there to cover (its own words, not its base workload's)."""
    traces: tuple[str, ...] = ()
    """Trace files, relative to the report directory (empty without `--traces`)."""
    instance: str | None = None
    """A P/D pair's instance this result compares ("prefill" or "decode"; `source` is the
    whole pair, which `--emit-regression` writes)."""

    @property
    def config(self) -> EngineConfig | None:
        """The engine config of what was compared: a pair's instance's own."""
        if self.source is None:
            return None
        if self.instance is None:
            return self.source.config
        side = prefill_side if self.instance == "prefill" else decode_side
        return side(self.source).config

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
    startup_seconds: float = 0.0
    """Time spent starting both systems before the first workload (importing vLLM in process,
    starting a worker): reported apart, so the first workload's time is its own."""
    log_counts: dict[str, int] = field(default_factory=dict)
    """Upstream log records and warnings by level, as written to the log file."""

    @property
    def ok(self) -> bool:
        return not self.stale and all(o.verdict in ("passed", "known") for o in self.outcomes)

    @property
    def unbuilt(self) -> tuple[str, ...]:
        """"SYSTEM could not be built: REASON", once per distinct reason."""
        return tuple(dict.fromkeys(o.result.unbuilt for o in self.outcomes
                                   if o.result.unbuilt is not None))

    @property
    def exit_code(self) -> int:
        """0: every workload reached the level; 1: a behaviour difference or an error (or a
        stale known divergence); 2: nothing differed, but a system could not be built for
        some workload, a configuration the user must change, not a difference."""
        if self.ok:
            return 0
        behavioural = self.stale or any(o.verdict in ("failed", "error")
                                        for o in self.outcomes)
        return 1 if behavioural else 2


def judge(result: LockstepResult, level: str,
          known: Sequence[KnownDivergence]) -> tuple[str, KnownDivergence | None]:
    if result.unbuilt is not None:
        return "unbuilt", None
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
    log_path: Path | None = None,
    offload: str | None = None,
) -> ConformRun:
    """Run every workload (suite names, bundled names or files) and judge it at `level`;
    `offload` (`OFFLOAD_MODES`) turns a CPU offload tier on for each (`with_offload`)."""
    import sys

    out = sys.stderr if stream is None else stream
    check_level(level)
    known = [k for k in known if k.for_pair(system, against)]
    system = follow_release(system, against)
    left, right = resolve_system(system), resolve_system(against)
    try:
        resolved: list[tuple[Workload, int]] = [resolve_workload(n) for n in workload_names]
        if offload is not None:
            for w, _ in resolved:
                if (why := left_out(w.name, offload)) is not None:
                    print(f"vtwin conform: {w.name}: left out with --offload {offload}: {why}",
                          file=out, flush=True)
            resolved = [(with_offload(w, offload), every) for w, every in resolved
                        if left_out(w.name, offload) is None]
        with upstream_logs(log_path) as counts:
            started = time.monotonic()
            if resolved:
                start_systems(((system, left), (against, right)), resolved[0][0].config, out)
            startup = time.monotonic() - started if resolved else 0.0
            outcomes = _run_all(resolved, left, right, level, known, trace_dir,
                                integrity_every, max_steps, progress_every, out)
    finally:
        close_system(left)  # a worker factory stops its worker
        close_system(right)
    left_name = outcomes[-1].result.left if outcomes else system
    right_name = outcomes[-1].result.right if outcomes else against
    used = [o.waiver for o in outcomes if o.waiver is not None]
    stale = stale_entries(known, level, [o.workload for o in outcomes], used)
    for entry in stale:
        print(f"vtwin conform: stale known divergence {entry.id!r} (level {entry.level}): "
              "it matched nothing; delete it", file=out, flush=True)
    return ConformRun(left_name, right_name, level, tuple(outcomes), tuple(stale), startup,
                      dict(counts))


def _run_all(resolved: list[tuple[Workload, int]], left: Any, right: Any, level: str,
             known: Sequence[KnownDivergence], trace_dir: Path | None,
             integrity_every: int | None, max_steps: int | None, progress_every: int,
             out: TextIO) -> list[WorkloadOutcome]:
    """The workloads in order, with a tqdm bar on a terminal and plain lines elsewhere."""
    total = len(resolved)
    bar = tqdm(total=total, unit="workload", file=out, disable=not _is_tty(out),
               dynamic_ncols=True, leave=False)

    def say(text: str) -> None:
        if bar.disable:
            print(f"vtwin conform: {text}", file=out, flush=True)
        else:
            bar.write(f"vtwin conform: {text}", file=out)

    def progress(name: str, step: int) -> None:
        if bar.disable:
            print(f"vtwin conform:     {name}: step {step}", file=out, flush=True)
        else:
            bar.set_postfix_str(f"{name}: step {step}")

    outcomes: list[WorkloadOutcome] = []
    for index, (workload, every) in enumerate(resolved, 1):
        if bar.disable:
            say(f"[{index}/{total}] {workload.name}: {len(workload.requests)} requests ...")
        bar.set_description(workload.name)
        # A P/D pair's two instances come back as two results (`NAME@prefill`, `@decode`).
        results = run_instances(
            workload, left, right, trace_dir=trace_dir, max_steps=max_steps,
            integrity_every=every if integrity_every is None else integrity_every,
            progress_every=progress_every if bar.disable else min(progress_every, 50),
            progress=progress,
        )
        entry = SUITE.get(workload.name)
        # A pair's two results: each instance's report shows that instance's own config.
        instances = ("prefill", "decode") if workload.pd_pair is not None else (None,)
        for result, instance in zip(results, instances, strict=True):
            verdict, waiver = judge(result, level, known)
            traces = () if trace_dir is None else tuple(  # a pair's: NAME@INSTANCE
                f"{trace_dir.name}/{trace_name(result.workload, side, name)}"
                for side, name in (("left", result.left), ("right", result.right)))
            outcomes.append(WorkloadOutcome(result.workload, workload.description,
                                            len(workload.requests), level, verdict, result,
                                            waiver, workload, entry.covers if entry else "",
                                            traces, instance))
            say(f"[{index}/{total}] {_line(outcomes[-1])}")
        bar.update(1)
    bar.close()
    return outcomes


def _is_tty(out: TextIO) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


def _line(outcome: WorkloadOutcome) -> str:
    r = outcome.result
    head = (f"{outcome.workload}: {r.steps} steps, {outcome.verdict} at {outcome.level} "
            f"(reached: {r.level_reached or 'none'}, {r.seconds:.1f}s)")
    if outcome.verdict == "unbuilt":
        return f"{outcome.workload}: {r.unbuilt}"
    if outcome.verdict == "error":
        return f"{head}: {r.error}"
    if outcome.stalled is not None:
        head += f"; {outcome.stalled}"
    if r.refused is not None:
        head += f"; {r.refused}"
    if r.same_failure is not None:
        head += f"; {r.same_failure}"
    divergence = outcome.divergence
    if divergence is not None:
        head += f": step {divergence.step}, field {divergence.field}"
        if outcome.waiver is not None:
            head += f" (known: {outcome.waiver.reason})"
    return head
