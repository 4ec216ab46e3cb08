"""The campaign driver: hands (family, seed) tasks to Ray actors and keeps every result.

Ray does the distributed part: it places one `CampaignWorker` actor per core (an embedded
local Ray with as many CPUs as this machine has, or the cluster at `--address`), restarts an
actor whose process dies and retries the call it was running (`MAX_RETRIES` times; a task
that kills its worker every time is recorded as ``crashed``, so it is not lost either). The
driver only hands the next task to the actor that just finished one (what `ray.util.ActorPool`
does, kept here so a failed call still says which task it was) and blocks in `ray.wait` until
a result arrives or the time budget ends.

Results are written to the store (`store.py`) by the driver, one transaction per task, as
they arrive: workers may live on other machines and never touch the campaign directory, and
a driver stopped at any moment keeps everything that had arrived. A failure whose signature
is new for its pair and family is shrunk once, as a task of its own on the same actors, and
the shrunk workload is written as a regression file (`suite.write_regression`, the format
`vtwin gate` runs). Failure classes left unshrunk by an earlier run are shrunk first.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from conformance.campaign.cluster import MAX_RETRIES, start_ray, start_workers
from conformance.campaign.plan import Plan
from conformance.campaign.store import FailureClass, Store
from conformance.campaign.task import CRASHED, UNBUILT, Task, TaskResult, crashed, one_line
from conformance.campaign.worker import ShrinkResult, code_digest
from conformance.rundirs import new_run_dir

OnResult = Callable[[TaskResult], None]
FLOOR_PER_CORE_MINUTE = 1.0
"""The fewest workloads a timed campaign must judge per worker per minute of budget."""


@dataclass(slots=True)
class Tally:
    """What this run did, for the progress bar and the summary line."""

    tasks: int = 0
    failures: int = 0
    stalls: int = 0
    regressions: list[str] = field(default_factory=list)
    unbuilt: dict[str, int] = field(default_factory=dict)
    """"SYSTEM could not be built: REASON" -> how many workloads it kept from running."""

    def add(self, result: TaskResult) -> None:
        self.tasks += 1
        self.failures += any(c.failed for c in result.comparisons)
        self.stalls += any("stall" in c.outcome for c in result.comparisons)
        for c in result.comparisons:
            if c.outcome == UNBUILT:
                self.unbuilt[c.detail] = self.unbuilt.get(c.detail, 0) + 1


@dataclass(frozen=True, slots=True)
class RunSummary:
    run_id: str
    run_dir: Path
    workers: int
    tasks: int
    failures: int
    regressions: tuple[str, ...]
    seconds: float
    startup_seconds: float
    status: str
    unbuilt: tuple[tuple[str, int], ...] = ()
    """Each system that could not be built, with the workloads it kept from running."""

    @property
    def throughput(self) -> float:
        """Workloads per minute per core, start-up excluded."""
        busy = max(self.seconds - self.startup_seconds, 1e-9)
        return self.tasks / (busy / 60) / max(self.workers, 1)

    def too_little(self, minutes: float | None) -> str | None:
        """Why this run checked too little to pass, or None: a finished run judged fewer
        workloads than `FLOOR_PER_CORE_MINUTE` per worker per minute of its time budget
        (at least one). A night that checked nothing must not read as a night that found
        nothing."""
        if minutes is None or self.status != "finished":
            return None
        floor = max(1, int(FLOOR_PER_CORE_MINUTE * minutes * max(self.workers, 1)))
        if self.tasks >= floor:
            return None
        return (f"judged {self.tasks} workloads, fewer than the floor of {floor} "
                f"({FLOOR_PER_CORE_MINUTE:g} per worker per minute of a {minutes:g}-minute "
                f"budget on {self.workers} workers; start-up took "
                f"{self.startup_seconds:.0f}s outside the budget)")


def pending(plan: Plan, done: set[tuple[str, int]]) -> Iterator[Task]:
    """Tasks not in the store yet, seed by seed, every family per seed (a time budget then
    covers the families evenly)."""
    seeds = range(*plan.seeds) if plan.seeds is not None else itertools.count()
    for seed in seeds:
        for family in plan.families:
            if (family, seed) not in done:
                yield Task(plan.systems, family, seed)


def run_campaign(plan: Plan, on_result: OnResult | None = None) -> RunSummary:
    """One campaign run (see the module docstring); KeyboardInterrupt ends it early with
    every arrived result kept (status ``interrupted``)."""
    import ray

    from conformance.campaign.report import publish

    store = Store.of(plan.out)
    run_dir = new_run_dir(plan.out, "campaign")
    started, clock = datetime.now(UTC), time.monotonic()
    store.start_run(run_dir.name, started.isoformat(timespec="seconds"), plan.systems_key,
                    ",".join(plan.families), plan.address, code_digest())
    tally, status, startup, owns = Tally(), "finished", 0.0, False
    actors: list[Any] = []
    try:
        owns = start_ray(plan)
        actors, _ = start_workers(plan)
        startup = time.monotonic() - clock
        # The budget starts once every worker is up: start-up (Ray, imports, a worker's
        # first system) is reported apart and never eats the time meant for checking.
        _loop(plan, store, run_dir.name, actors, time.monotonic(), tally, on_result)
    except KeyboardInterrupt:
        status = "interrupted"
    except BaseException:
        status = "failed"
        raise
    finally:
        for actor in actors:
            ray.kill(actor)
        if owns:
            ray.shutdown()
        seconds = time.monotonic() - clock
        store.finish_run(run_dir.name, finished=datetime.now(UTC).isoformat(timespec="seconds"),
                         workers=len(actors), tasks=tally.tasks, seconds=round(seconds, 2),
                         startup_seconds=round(startup, 2), status=status)
        publish(store, plan.out, run_dir)
        store.close()
    return RunSummary(run_dir.name, run_dir, len(actors), tally.tasks, tally.failures,
                      tuple(tally.regressions), seconds, startup, status,
                      tuple(tally.unbuilt.items()))


def _loop(plan: Plan, store: Store, run_id: str, actors: list[Any], clock: float,
          tally: Tally, on_result: OnResult | None) -> None:
    """Hand out tasks until they run out or the budget, counted from `clock` (the moment
    the workers were ready), ends."""
    import ray

    done = store.done(plan.systems_key)
    total = (None if plan.seeds is None else
             sum(1 for _ in pending(plan, done)))
    tasks = pending(plan, done)
    shrinks = deque(store.unshrunk(plan.systems_key))
    queued = store.shrunk() | {_class_key(f) for f in shrinks}
    deadline = None if plan.minutes is None else clock + 60 * plan.minutes
    inflight: dict[Any, tuple[Any, Task | FailureClass]] = {}
    idle = list(actors)
    tty = sys.stderr.isatty()
    bar = tqdm(total=total, unit="workload", desc="campaign", disable=not tty, file=sys.stderr)
    with bar:
        while True:
            now = time.monotonic()
            accepting = deadline is None or now < deadline
            while idle and accepting:
                job: Task | FailureClass | None = (shrinks.popleft() if shrinks
                                                   else next(tasks, None))
                if job is None:
                    break
                actor = idle.pop()
                if isinstance(job, FailureClass):
                    left = plan.budget.seconds if deadline is None else deadline - now
                    budget = replace(plan.budget, seconds=max(10.0, min(plan.budget.seconds,
                                                                        left)))
                    inflight[actor.shrink.remote(job, budget)] = (actor, job)
                else:
                    inflight[actor.run.remote(job)] = (actor, job)
            if not inflight:
                return
            limit = None if deadline is None else \
                (deadline if accepting else deadline + plan.grace_seconds) - now
            ready, _ = ray.wait(list(inflight), num_returns=1,
                                timeout=None if limit is None else max(limit, 0.0))
            if not ready:
                if accepting:
                    continue  # the budget ran out: no new work, running work may finish
                return  # still running after the grace period: left for the next run
            for ref in ready:
                actor, job = inflight.pop(ref)
                idle.append(actor)
                outcome = _get(ref, job)
                if isinstance(outcome, ShrinkResult):
                    _keep_shrink(plan, store, run_id, outcome, tally)
                    continue
                store.add_result(outcome, run_id)
                tally.add(outcome)
                for failure in _new_failures(outcome, queued):
                    shrinks.append(failure)
                bar.update(1)
                bar.set_postfix(failures=tally.failures, stalls=tally.stalls)
                if not tty and tally.tasks % 100 == 0:
                    print(f"vtwin campaign: {tally.tasks} workloads, {tally.failures} "
                          f"failing, {time.monotonic() - clock:.0f}s", file=sys.stderr)
                if on_result is not None:
                    on_result(outcome)


def _get(ref: Any, job: Task | FailureClass) -> TaskResult | ShrinkResult:
    """The call's value; a call that failed on every retry becomes a result that says so."""
    import ray
    from ray.exceptions import RayError

    try:
        value: TaskResult | ShrinkResult = ray.get(ref)
        return value
    except RayError as err:
        detail = one_line(str(err).strip().splitlines()[-1] if str(err).strip() else repr(err))
        if isinstance(job, FailureClass):
            return ShrinkResult(job, None, 0, 0, 0.0, f"worker failed: {detail}")
        return crashed(job, f"worker died {MAX_RETRIES + 1} times on it: {detail}")


def _class_key(failure: FailureClass) -> tuple[str, str, str, str]:
    return failure.left, failure.right, failure.family, failure.signature


def _new_failures(result: TaskResult, queued: set[tuple[str, str, str, str]]
                  ) -> Iterator[FailureClass]:
    """Failure classes first seen in this result (one shrink per class and campaign)."""
    for c in result.comparisons:
        if not c.failed or c.outcome == CRASHED:
            continue
        failure = FailureClass(result.task.systems_key, c.left, c.right, result.task.family,
                               c.signature, result.task.seed)
        if _class_key(failure) not in queued:
            queued.add(_class_key(failure))
            yield failure


def _keep_shrink(plan: Plan, store: Store, run_id: str, shrunk: ShrinkResult,
                 tally: Tally) -> None:
    from conformance.sched.suite import write_regression

    failure = shrunk.failure
    name = content = None
    after = 0
    if shrunk.workload is not None:
        tag = f"{failure.signature}-vs-{failure.right}".replace(":", "-")
        path = write_regression(shrunk.workload, f"{tag}: {shrunk.detail}",
                                plan.out / "regressions")
        name, content, after = path.name, path.read_text(encoding="utf-8"), \
            len(shrunk.workload.requests)
        tally.regressions.append(str(path))
    store.add_regression(failure, name, content, (shrunk.requests_before, after), shrunk.runs,
                         round(shrunk.seconds, 2), shrunk.detail, run_id)
