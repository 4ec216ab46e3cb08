"""`ProxySystem`: a `System` that lives in a worker process, driven over pipes.

One `WorkerProcess` per system spec per run: `worker_factory(spec)` returns a factory that
starts the worker on first use and builds each workload's system inside it, so the cost of
importing torch and vLLM is paid once per run, not once per workload. The worker runs under
the spec's managed environment (`conformance.systems.remote.envs`) or, for ``SPEC+worker``, under
this interpreter; this source tree is put first on its PYTHONPATH so both sides run the same
harness code.

Failures keep their shape: an exception raised by the remote system comes back as an exception
of the same type name (`IntegrityError` and `UserError` as themselves), so the lockstep report
reads as it does in process; a worker that dies is one `WorkerDied` line naming the system,
the call, the exit code and the worker's last stderr lines.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec

from conformance.paths import REPO_ROOT
from conformance.systems.protocol import (
    CacheEvent,
    RunnerOutput,
    Scheduled,
    System,
    SystemState,
    Update,
)
from conformance.systems.remote.protocol import (
    METHODS,
    Build,
    Built,
    Call,
    Closed,
    Drop,
    Hello,
    Message,
    Reply,
    convert,
    read_hello,
    read_reply,
    write_frame,
)
from conformance.systems.specs import SystemSpec
from conformance.systems.transfer_records import BlockIds
from vtwin.errors import IntegrityError, UserError
from workloads.controls import ControlSpec
from workloads.model import EngineConfig, RequestSpec

ROOT = REPO_ROOT
STDERR_LINES = 4


class WorkerDied(RuntimeError):
    """The worker process exited (or closed its pipe) while the harness waited on it."""


class RemoteError(Exception):
    """Base of the exception types re-raised from a worker under the remote type's name."""

    trace: str = ""


_REMOTE_TYPES: dict[str, type[Exception]] = {"IntegrityError": IntegrityError,
                                             "UserError": UserError}


def remote_error(kind: str, message: str, trace: str) -> Exception:
    if kind not in _REMOTE_TYPES:
        _REMOTE_TYPES[kind] = type(kind, (RemoteError,), {"__module__": "worker"})
    err = _REMOTE_TYPES[kind](message)
    err.add_note(f"in the worker:\n{trace}")
    return err


WORKER_COVERAGE_ENV = "VTWIN_WORKER_COVERAGE"
"""An rcfile path: workers then run under coverage.py with it, measuring the release in its
own environment (`python -m conformance.coverage --release X.Y.Z`)."""


def worker_argv(python: Path | str, env: Mapping[str, str]) -> list[str]:
    """The worker's command line: `python -m conformance.systems.remote`, under coverage.py
    when `WORKER_COVERAGE_ENV` names an rcfile."""
    worker = ["-m", "conformance.systems.remote"]
    rcfile = env.get(WORKER_COVERAGE_ENV)
    if rcfile:
        return [str(python), "-m", "coverage", "run", f"--rcfile={rcfile}", *worker]
    return [str(python), *worker]


class WorkerProcess:
    """A started worker: frames in and out, its stderr drained into a short tail."""

    def __init__(self, label: str, python: Path | str, env: Mapping[str, str]) -> None:
        self.label = label
        paths = [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        self.proc = subprocess.Popen(
            worker_argv(python, env), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**env, "PYTHONPATH": os.pathsep.join(paths)})
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[bytes] = self.proc.stdin
        self._out: IO[bytes] = self.proc.stdout
        self.stderr: deque[str] = deque(maxlen=50)
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        self.dead: WorkerDied | None = None
        try:
            self.hello: Hello = read_hello(self._out)
        except (Closed, msgspec.DecodeError):
            raise self._died("start-up") from None

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip())
        if os.environ.get("VTWIN_WORKER_STDERR"):
            print("\n".join(self.stderr), file=sys.stderr)

    def _died(self, what: str) -> WorkerDied:
        try:
            code: int | None = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._drain.join(timeout=2)
        tail = " | ".join(line for line in list(self.stderr)[-STDERR_LINES:] if line)
        self.dead = WorkerDied(
            f"system {self.label!r}: worker (pid {self.proc.pid}) died during {what} "
            f"(exit code {code}); last stderr: {tail or '(empty)'}")
        return self.dead

    def request(self, message: Message, what: str) -> Any:
        if self.dead is not None:
            raise WorkerDied(str(self.dead))
        try:
            write_frame(self._in, message)
            reply: Reply = read_reply(self._out)
        except (Closed, BrokenPipeError, OSError, msgspec.DecodeError):
            raise self._died(what) from None
        if reply.error is not None or reply.kind is not None:
            raise remote_error(reply.kind or "Exception", reply.error or "", reply.trace or "")
        return reply.value

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):  # a killed worker: the flush finds no reader
                self._in.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=2)  # stderr is at its end once the worker has exited
        for pipe in (self._in, self._out, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(OSError):
                    pipe.close()


class ProxySystem:
    """The harness's handle on one system inside a worker; every call is one round trip."""

    def __init__(self, worker: WorkerProcess, built: Built) -> None:
        self.worker = worker
        self.handle = built.system
        self.name = built.name
        self.none_hash = built.none_hash
        self.closed = False

    def _call(self, method: str, *args: Any) -> Any:
        value = self.worker.request(Call(self.handle, method, list(args)), method)
        kind = METHODS[method][1]
        try:
            return convert(value, kind)
        except msgspec.ValidationError as err:
            raise UserError(f"system {self.worker.label!r}: {method} returned the wrong type "
                            f"({err})") from None

    def add_request(self, request: RequestSpec, arrival_time: float) -> None:
        self._call("add_request", request, arrival_time)

    def abort(self, request_id: str) -> bool:
        result: bool = self._call("abort", request_id)
        return result

    def has_requests(self) -> bool:
        result: bool = self._call("has_requests")
        return result

    def control(self, control: ControlSpec) -> bool | None:
        result: bool | None = self._call("control", control)
        return result

    def resolve_deferred(self, scheduled: Scheduled,
                         drafts: Sequence[tuple[str, Sequence[int]]]) -> Scheduled:
        result: Scheduled = self._call("resolve_deferred", scheduled.native,
                                       [(rid, list(d)) for rid, d in drafts])
        return result

    def throttle_prefills(self, throttled: bool) -> None:
        self._call("throttle_prefills", throttled)

    def compile_grammar(self, request_id: str, failed: bool) -> None:
        self._call("compile_grammar", request_id, failed)

    def schedule(self) -> Scheduled:
        result: Scheduled = self._call("schedule")
        return result

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        result: Update = self._call("update", scheduled.native, output)
        return result

    def update_draft_token_ids(self, drafts: Sequence[tuple[str, Sequence[int]]]) -> None:
        self._call("update_draft_token_ids", [(rid, list(ids)) for rid, ids in drafts])

    def block_tables(self, request_ids: Sequence[str]) -> dict[str, BlockIds]:
        result: dict[str, BlockIds] = self._call("block_tables", list(request_ids))
        return result

    def block_hashes(self, since: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
        result: dict[str, tuple[str, ...]] = self._call("block_hashes", dict(since))
        return result

    def state(self) -> SystemState:
        result: SystemState = self._call("state")
        return result

    def take_events(self) -> tuple[CacheEvent, ...]:
        result: tuple[CacheEvent, ...] = self._call("take_events")
        return result

    def check_integrity(self) -> None:
        self._call("check_integrity")

    def close(self) -> None:
        """Release the remote system (the worker stays up for the run's next workload)."""
        if not self.closed and self.worker.dead is None and self.worker.proc.poll() is None:
            self.closed = True
            self.worker.request(Drop(self.handle), "close")


class WorkerFactory:
    """`EngineConfig -> System` for an out-of-process spec; one worker for all its systems."""

    def __init__(self, spec: SystemSpec, python: Path | str, env: Mapping[str, str]) -> None:
        self.spec = spec
        self.python = python
        self.env = dict(env)
        self.worker: WorkerProcess | None = None

    def start(self) -> WorkerProcess:
        """The worker, started on first use with one line on stderr (a release's first system
        then pays for importing torch and vLLM there, 10-20 s)."""
        if self.worker is None:
            print(f"vtwin: starting a worker for {self.spec.text!r} ({self.python})",
                  file=sys.stderr, flush=True)
            self.worker = WorkerProcess(self.spec.text, self.python, self.env)
            atexit.register(self.worker.close)
        return self.worker

    def __call__(self, config: EngineConfig) -> System:
        worker = self.start()
        built = convert(worker.request(Build(self.spec.in_worker, config), "build"), Built)
        return ProxySystem(worker, built)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def worker_factory(spec: SystemSpec) -> WorkerFactory:
    """The factory of an out-of-process spec: a managed environment's interpreter (built
    before, or a one-line error saying how) or, for ``+worker``, this one."""
    from conformance.systems.remote.envs import require_env, worker_env

    python = require_env(spec) if spec.needs_env else Path(sys.executable)
    return WorkerFactory(spec, python, worker_env())
