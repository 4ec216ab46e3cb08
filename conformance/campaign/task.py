"""One campaign task: a (family, seed) workload run on the campaign's systems, as small records.

What goes back to the driver is deliberately small (a few strings and numbers per pair of
systems): tasks may run on other machines and thousands of results cross the network, while
everything bulky (records, traces) can be rebuilt from the key.

Two systems run in lockstep (`run_lockstep`: stops at the first schedule divergence, reads
stalls on both sides at the same step). Three or more run each once (`Driver` alone, as
`vtwin record` does) and the first is compared with each other one offline
(`sched.recorded.compare_recorded`, as `vtwin compare` does), so each system pays for the workload
once however many pairs there are. A bare `impl` follows the release it is compared with, as
in `vtwin conform` (`pairs_of`), so against two releases the twin runs as each.

Outcomes per pair: ``passed``; ``stall-agreed`` (both stalled the same way: agreement, as in
`vtwin conform`); ``refused`` (both refused the config when built: agreement, as in
`run_lockstep`); ``same-failure`` (both stopped at the same step on the same release check, an
upstream bug the twin reproduces: agreement, `conformance.sched.failures`); ``diverged`` (a
difference at `exact`), ``stalled`` (one side stalled, or the two differently), ``error`` (a
system raised) and ``crashed`` (the worker process died on every retry; set by the driver). The
last four are failures. ``unbuilt`` (one system could not be built for the config) is neither:
an error of the setup, which `vtwin campaign` reports as its verdict and exits 2 on. A failure's
*signature*
(``exact:block_tables``, ``stall:right:never-admitted``, ``error:IntegrityError``) is what
the campaign shrinks once per pair and family, instead of once per workload.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from conformance.campaign.families import workload_for
from conformance.sched.driver import Driver, Stalled
from conformance.sched.failures import error_end
from conformance.sched.lockstep import LockstepResult, run_lockstep
from conformance.sched.recorded import Recorded, compare_recorded
from conformance.systems.protocol import SystemFactory, close_system
from conformance.systems.registry import build_reason
from conformance.systems.remote.proxy import WorkerDied
from workloads.model import Workload

PASSED = "passed"
STALL_AGREED = "stall-agreed"
REFUSED = "refused"
SAME_FAILURE = "same-failure"
DIVERGED = "diverged"
STALLED = "stalled"
ERROR = "error"
CRASHED = "crashed"
UNBUILT = "unbuilt"
"""One system could not be built for the draw's config: a setup error the run reports as its
verdict ("SYSTEM could not be built: REASON"), never a difference, so never shrunk."""
FAILURES: tuple[str, ...] = (DIVERGED, STALLED, ERROR, CRASHED)
DETAIL_CHARS = 400


@dataclass(frozen=True, slots=True)
class Task:
    """What a worker is asked to do: everything else follows from these three fields."""

    systems: tuple[str, ...]
    family: str
    seed: int

    @property
    def systems_key(self) -> str:
        return ",".join(self.systems)

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        return pairs_of(self.systems)


def pairs_of(systems: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The first system against each other one, a bare twin following each one's release
    (`specs.follow_release`: `impl` against `vllm==0.33.0` runs as `impl==0.33.0`), as
    `vtwin conform` pairs them."""
    from conformance.systems.specs import follow_release

    return tuple((follow_release(systems[0], other), other) for other in systems[1:])


def specs_of(systems: tuple[str, ...]) -> tuple[str, ...]:
    """Every system the pairs run, once each (a twin may run as several releases)."""
    return tuple(dict.fromkeys(spec for pair in pairs_of(systems) for spec in pair))


@dataclass(frozen=True, slots=True)
class Comparison:
    """How one pair of systems compared on one workload."""

    left: str
    right: str
    outcome: str
    level: str | None
    """The strictest level the pair reached (None: not even `schedule`, or an error)."""
    signature: str = ""
    step: int | None = None
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES


@dataclass(frozen=True, slots=True)
class TaskResult:
    task: Task
    workload: str
    draw: str
    """The config draw as JSON (what the seed changed in the family's config)."""
    requests: int
    steps: int
    seconds: float
    comparisons: tuple[Comparison, ...]
    host: str
    pid: int


def crashed(task: Task, detail: str, host: str = "?", pid: int = 0) -> TaskResult:
    """The result of a task whose worker died under it, for every pair."""
    comparisons = tuple(Comparison(a, b, CRASHED, None, CRASHED, None, one_line(detail))
                        for a, b in task.pairs)
    return TaskResult(task, f"{task.family}-seed{task.seed}", "{}", 0, 0, 0.0, comparisons,
                      host, pid)


def where() -> tuple[str, int]:
    """This worker's host name and process id (reported with every result)."""
    return socket.gethostname(), os.getpid()


def run_task(task: Task, factories: Mapping[str, SystemFactory]) -> TaskResult:
    """Generate the task's workload and run it on every system (see the module docstring).
    Never raises for a system's failure: that is a result like any other."""
    started = time.monotonic()
    host, pid = where()
    try:
        workload, draw = workload_for(task.family, task.seed, task.systems)
    except Exception as err:  # a generator bug is a finding too, not a lost task
        detail = one_line(f"generating the workload raised {type(err).__name__}: {err}")
        failed = tuple(Comparison(a, b, ERROR, None, "error:generate", None, detail)
                       for a, b in task.pairs)
        return TaskResult(task, f"{task.family}-seed{task.seed}", "{}", 0, 0,
                          time.monotonic() - started, failed, host, pid)
    comparisons: tuple[Comparison, ...]
    if len(task.pairs) == 1:
        left, right = task.pairs[0]
        result = run_lockstep(workload, factories[left], factories[right])
        comparisons = (classify(result, left, right),)
        steps = result.steps
    else:
        runs = {spec: record_run(workload, factories[spec], spec)
                for spec in specs_of(task.systems)}
        comparisons = tuple(compare_runs(runs[a], runs[b], a, b) for a, b in task.pairs)
        steps = max(len(run.records) for run in runs.values())
    return TaskResult(task, workload.name, json.dumps(draw, sort_keys=True),
                      len(workload.requests), steps, time.monotonic() - started, comparisons,
                      host, pid)


def pair_signature(workload: Workload, left: SystemFactory, right: SystemFactory,
                   names: tuple[str, str]) -> Comparison:
    """One pair in lockstep on `workload`: what the shrinker re-runs."""
    return classify(run_lockstep(workload, left, right), *names)


def classify(result: LockstepResult, left: str, right: str) -> Comparison:
    """A lockstep result as an outcome and a signature (judged as `vtwin conform` judges)."""
    level = result.level_reached
    if result.refused is not None:
        return Comparison(left, right, REFUSED, None, "", None, one_line(result.refused))
    if result.unbuilt is not None:
        return Comparison(left, right, UNBUILT, None, UNBUILT, None, one_line(result.unbuilt))
    if result.same_failure is not None:
        return Comparison(left, right, SAME_FAILURE, level, "", result.steps,
                          one_line(result.same_failure))
    if result.error is not None:
        stall = result.stall
        if stall is not None and not stall.agreed:
            first = stall.left if stall.left is not None else stall.right
            reason = first.reason if first is not None else "?"
            return Comparison(left, right, STALLED, level, f"stall:{stall.side}:{reason}",
                              stall.step, one_line(result.error))
        raised = re.search(r" raised (\w+)", result.error)
        kind = raised.group(1) if raised else "run"
        return Comparison(left, right, ERROR, level, f"error:{kind}", None,
                          one_line(result.error))
    divergence = result.divergence_at("exact")
    if divergence is not None:
        return Comparison(left, right, DIVERGED, level,
                          f"{divergence.level}:{divergence.top_field}", divergence.step,
                          one_line(divergence.summary()))
    if result.stall is not None:
        return Comparison(left, right, STALL_AGREED, level, "", result.stall.step,
                          one_line(result.stall.summary(left, right)))
    return Comparison(left, right, PASSED, level)


def record_run(workload: Workload, factory: SystemFactory, label: str) -> Recorded:
    """One system alone on `workload`, its records kept in memory (`vtwin record` without the
    file): the end says finished, stalled (step, reason) or error. `label` names the system
    until it is built (a system that fails to build has no name of its own)."""
    records = []
    end: dict[str, object] = {"end": "finished"}
    name, none_hash = label, None
    try:
        system = factory(workload.config)
    except WorkerDied:
        raise
    except Exception as err:  # a refused config: agreement if the other side refuses too
        return Recorded(name, workload.name, None, (), {
            "end": "error", "step": 0, "detail": build_reason(err), "refused": True})
    try:
        name, none_hash = system.name, system.none_hash
        for step in Driver(system, workload, integrity_every=1, snapshot_before=False).steps():
            records.append(step.record)
    except Stalled as stalled:
        end = {"end": "stalled", "step": stalled.step, "reason": stalled.reason,
               "detail": stalled.detail}
    except Exception as err:
        end = error_end(err, len(records))
    finally:
        close_system(system)
    return Recorded(name, workload.name, none_hash, tuple(records), end)


def compare_runs(a: Recorded, b: Recorded, left: str, right: str) -> Comparison:
    """Two recorded runs of one workload, judged like a lockstep run of the pair: a
    difference before either side stalled is a divergence; after that, the stalls decide."""
    if a.end.get("refused") and b.end.get("refused"):
        return Comparison(left, right, REFUSED, None, "", None, one_line(
            f"both systems refuse the config: left {a.end['detail']}; right {b.end['detail']}"))
    for run, spec in ((a, left), (b, right)):
        if run.end.get("refused"):
            return Comparison(left, right, UNBUILT, None, UNBUILT, None,
                              one_line(f"{spec} could not be built: {run.end['detail']}"))
    result = compare_recorded(a, b)
    if result.error is not None:
        kind = next((str(run.end.get("detail", "")).split(":", 1)[0]
                     for run in (a, b) if run.end.get("end") == "error"), "run")
        return Comparison(left, right, ERROR, None, f"error:{kind}", None,
                          one_line(result.error))
    stalls = [run.end for run in (a, b) if run.end.get("end") == "stalled"]
    divergence = result.divergence_at("exact")
    first_stall = min((int(str(end["step"])) for end in stalls), default=None)
    if first_stall is None or (divergence is not None and divergence.step < first_stall):
        return classify(result, left, right)
    if len(stalls) == 2 and (a.end["step"], a.end["reason"]) == (b.end["step"],
                                                                  b.end["reason"]):
        return Comparison(left, right, STALL_AGREED, result.level_reached, "", first_stall,
                          one_line(f"both stalled: {a.end.get('detail')}"))
    side = "both" if len(stalls) == 2 else "left" if a.end.get("end") == "stalled" else "right"
    first = stalls[0]
    return Comparison(left, right, STALLED, result.level_reached,
                      f"stall:{side}:{first.get('reason')}", first_stall,
                      one_line(f"{side} stalled: {first.get('detail')}"))


def one_line(text: str) -> str:
    """A detail for the store and the report: one line, bounded."""
    flat = " ".join(text.split())
    return flat if len(flat) <= DETAIL_CHARS else flat[: DETAIL_CHARS - 3] + "..."
