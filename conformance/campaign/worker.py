"""What one campaign worker does, as a plain class: the driver runs it as a Ray actor.

An actor, not a stateless task, because a worker's systems are expensive to start and cheap
to reuse: a release (`vllm==X.Y.Z`) runs in a worker process of its own under its managed
environment, and importing torch and vLLM there takes 10-50 s; in-process `upstream` pays the
same import. The actor keeps one factory per system spec (`registry.CheckedFactory`, which keeps
its release worker up between workloads), so that cost is paid once per actor, not per task.
Ray restarts an actor whose process dies and retries the call it was running (the driver
sets `max_restarts` / `max_task_retries`), so a killed worker costs a restart, not a result.

`prepare()` is called once per actor before any task: it builds each release's managed
environment where this machine lacks it (`conformance.systems.remote.envs`, under a file lock,
since every
actor of a machine shares the cache) and starts every system on a small config, so a machine
that cannot run a release says so at once, in one line naming the host and the reason,
instead of failing every task.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from conformance.campaign.families import workload_for
from conformance.campaign.shrink import Budget, shrink
from conformance.campaign.store import FailureClass
from conformance.campaign.task import (
    CRASHED,
    Task,
    TaskResult,
    crashed,
    pair_signature,
    run_task,
    specs_of,
    where,
)
from conformance.paths import REPO_ROOT
from conformance.systems.protocol import SystemFactory, close_system
from conformance.systems.remote.proxy import WorkerDied
from conformance.systems.specs import parse_spec
from vtwin.errors import UserError
from workloads.model import EngineConfig, Workload

SOURCE_DIRS = ("impl", "conformance", "workloads", "vtwin")
ROOT = REPO_ROOT


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    host: str
    pid: int
    code: str
    """Digest of this machine's vtwin sources (the driver refuses a worker whose differs)."""
    startup: tuple[tuple[str, float], ...]
    """Seconds each system took to start (environment check or build included)."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShrinkResult:
    failure: FailureClass
    workload: Workload | None
    """The shrunk workload (None: the original no longer failed the same way, or an error)."""
    requests_before: int
    runs: int
    seconds: float
    detail: str


def code_digest(root: Path = ROOT) -> str:
    """A digest of every Python source the harness runs, with what else decides a key's
    workload (the Python minor version: `random`'s derived methods; the Hypothesis version:
    the `hypothesis` family's draws): equal digests, equal workloads and harness."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        drawn_by = version("hypothesis")
    except PackageNotFoundError:
        drawn_by = "none"
    digest = hashlib.sha256(f"{sys.version_info[:2]} hypothesis {drawn_by}".encode())
    for directory in SOURCE_DIRS:
        for path in sorted((root / directory).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_env(spec_text: str) -> None:
    """Build a release's managed environment unless it is built. One build per machine at a
    time (a lock file beside the environments); an actor that waited on another's build finds
    it built, or finds the failure the other wrote into the lock file and reports that rather
    than spend minutes failing again."""
    from conformance.systems.remote.envs import cache_root, create, env_dir, env_info

    spec = parse_spec(spec_text)
    if not spec.needs_env or env_info(env_dir(spec)) is not None:
        return
    lock_path = cache_root() / "envs" / f".{spec.slug}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    waited_since = time.time()
    with lock_path.open("a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if env_info(env_dir(spec)) is not None:
            return
        lock.seek(0)
        failure = lock.read().strip()
        if failure and lock_path.stat().st_mtime >= waited_since:
            raise UserError(failure)
        try:
            create(spec_text, io.StringIO())
        except Exception as err:
            lock.truncate(0)
            lock.write(" ".join(str(err).split()))
            lock.flush()
            raise


DIED = f"error:{WorkerDied.__name__}"


def _died(result: TaskResult) -> bool:
    """Whether a release worker process died under the task (not the workload's doing)."""
    return any(c.signature == DIED or c.outcome == CRASHED for c in result.comparisons)


class CampaignWorker:
    """One worker's systems and the three things it does with them (module docstring)."""

    def __init__(self, systems: tuple[str, ...]) -> None:
        self.systems = specs_of(systems)
        self.factories: dict[str, SystemFactory] = {}

    def prepare(self) -> WorkerInfo:
        from conformance.systems.registry import resolve_system
        host, pid = where()
        startup: list[tuple[str, float]] = []
        for spec in self.systems:
            started = time.monotonic()
            try:
                ensure_env(spec)
                factory = self.factories.get(spec) or resolve_system(spec)
                self.factories[spec] = factory
                close_system(factory(EngineConfig()))
            except Exception as err:  # reported by the driver as one line per machine
                kind = "" if isinstance(err, UserError) else f"{type(err).__name__}: "
                return WorkerInfo(host, pid, code_digest(), tuple(startup),
                                  f"cannot run {spec}: {kind}{' '.join(str(err).split())}")
            startup.append((spec, round(time.monotonic() - started, 2)))
        return WorkerInfo(host, pid, code_digest(), tuple(startup))

    def ready(self) -> None:
        """Systems started; a restarted actor comes back without them and starts them here."""
        if len(self.factories) < len(self.systems):
            info = self.prepare()
            if info.error is not None:
                raise UserError(f"worker {info.host}: {info.error}")

    def run(self, task: Task) -> TaskResult:
        """The task's result. A release worker process that died under it (killed, out of
        memory) is not the workload's doing: the systems are started afresh and the task runs
        once more; dying again, it is stored as ``crashed`` (never shrunk: each try would
        kill a worker), and the next task gets fresh systems too."""
        result = self._attempt(task)
        if not _died(result):
            return result
        self.close()
        result = self._attempt(task)
        if _died(result):
            self.close()
            return crashed(task, next((c.detail for c in result.comparisons if c.detail),
                                      "a release worker died twice"))
        return result

    def _attempt(self, task: Task) -> TaskResult:
        self.ready()
        try:
            return run_task(task, self.factories)
        except WorkerDied as err:  # died while a system was being built
            return crashed(task, f"a release worker died: {err}", *where())

    def shrink(self, failure: FailureClass, budget: Budget) -> ShrinkResult:
        """Shrink the failure's workload for its pair (`shrink.shrink`); the same signature
        must hold at every step, starting with the unshrunk workload."""
        self.ready()
        started = time.monotonic()
        left, right = self.factories[failure.left], self.factories[failure.right]
        names = (failure.left, failure.right)

        def fails(candidate: Workload) -> bool:
            got = pair_signature(candidate, left, right, names)
            return got.failed and got.signature == failure.signature

        try:
            workload, _ = workload_for(failure.family, failure.seed,
                                       tuple(failure.systems.split(",")))
            if not fails(workload):
                return ShrinkResult(failure, None, len(workload.requests), 1,
                                    time.monotonic() - started,
                                    "did not fail the same way again (nondeterministic?)")
            found, runs = shrink(workload, fails, budget)
        except Exception as err:
            return ShrinkResult(failure, None, 0, 0, time.monotonic() - started,
                                f"shrinking raised {type(err).__name__}: {err}")
        shrunk = replace(found, description=f"shrunk by vtwin campaign ({failure.left} vs "
                                            f"{failure.right}, {failure.signature}); "
                                            f"{found.description}")
        return ShrinkResult(failure, shrunk, len(workload.requests), runs + 1,
                            time.monotonic() - started,
                            f"{len(workload.requests)} -> {len(found.requests)} requests "
                            f"in {runs + 1} runs")

    def pid(self) -> int:
        return where()[1]

    def close(self) -> None:
        for factory in self.factories.values():
            close_system(factory)
        self.factories.clear()
