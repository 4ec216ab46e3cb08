"""The driver: feeds one workload to one `System`, step by step, as an engine core would.

Each step: add the requests arriving at this step (``arrival_time`` is the step index, so both
systems see identical values), apply this step's aborts one id per call, then run the engine
loop body. The sync body mirrors `EngineCore.step` + `post_step`: schedule, execute (the
`FakeRunner`), update from the output, then hand the drafter's tokens to the scheduler. The
async body mirrors `EngineCore.step_with_batch_queue` with a batch queue of depth 2: the batch
scheduled at step N+1 is scheduled before step N's output is applied.

`Driver.steps()` yields a `Step` (state before, record after, prefix-cache events) per step, so
a caller can compare two systems in lockstep and stop at the first divergence. Every step also
goes to a `LivenessMonitor` (`liveness.py`): a run that stops making progress raises `Stalled`
(step, reason, queues, block counts) after a few idle steps instead of spinning to the cap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from conformance.sched.arrivals import Arrivals
from conformance.sched.job_worker import JobWorker
from conformance.sched.liveness import DriverStalled, LivenessMonitor, Stalled
from conformance.sched.multi_worker import MultiWorker
from conformance.sched.pd_worker import PDWorker
from conformance.sched.record import StepRecord, cached_digest
from conformance.sched.runner import FakeRunner
from conformance.sched.transfers import TransferWorker
from conformance.systems.optional import (
    apply_control,
    compile_grammar,
    resolve_deferred,
    throttle_prefills,
)
from conformance.systems.protocol import (
    BlockCounts,
    CacheEvent,
    RunnerOutput,
    Scheduled,
    System,
    SystemState,
    Update,
)
from conformance.systems.transfer_records import (
    BlockIds,
    ConnectorReport,
    JobTransfers,
    MultiTransfers,
    Transfers,
)
from vtwin.errors import UserError
from workloads.model import RequestSpec, Workload

BATCH_QUEUE_DEPTH = 2
_NO_STATE = SystemState((), (), BlockCounts(0, 0, 0))

__all__ = ["BATCH_QUEUE_DEPTH", "Driver", "DriverStalled", "Stalled", "Step",
           "default_max_steps"]


@dataclass(frozen=True, slots=True)
class Step:
    before: SystemState
    record: StepRecord
    events: tuple[CacheEvent, ...]


def session_parts(workload: Workload) -> list[RequestSpec]:
    """Every streaming session's later input parts and its close, as the requests the client
    sends under the session's id, in step order: a part is resumable and carries its tokens
    and `max_tokens` (the session's sampling settings otherwise); the close is an empty,
    non-resumable request (`workloads.streaming`)."""
    parts: list[RequestSpec] = []
    for request in workload.requests:
        if request.stream_end_step is None:
            continue
        for chunk in request.stream:
            parts.append(replace(request, arrival_step=chunk.arrival_step,
                                 prompt_token_ids=chunk.prompt_token_ids,
                                 max_tokens=chunk.max_tokens, prompt_spec=None, stream=(),
                                 min_tokens=min(request.min_tokens, chunk.max_tokens)))
        parts.append(replace(request, arrival_step=request.stream_end_step,
                             prompt_token_ids=(), max_tokens=1, min_tokens=0, prompt_spec=None,
                             stream=(), resumable=False))
    parts.sort(key=lambda part: part.arrival_step)
    return parts


def default_max_steps(workload: Workload) -> int:
    """Generous: every token of every request in its own step, twice, after the last arrival
    (closed-loop arrivals: the earliest, which already adds every gap of its chain), plus the
    continuum policy's longest pin, which holds blocks for that long after the last finish."""
    last = max((r.arrival_step for r in workload.requests), default=0)
    work = sum(r.prompt_len + r.max_tokens for r in workload.requests)
    continuum = workload.config.continuum
    pins = 0 if continuum is None else 2 * int(
        max(continuum.ttl_ms, continuum.threshold_ms) // continuum.step_ms)
    return last + 2 * work + 1000 + pins


class Driver:
    def __init__(self, system: System, workload: Workload, *, integrity_every: int = 0,
                 max_steps: int | None = None, snapshot_before: bool = True,
                 stall_patience: int | None = None) -> None:
        """`integrity_every`: call `check_integrity` every that many steps (0: never).
        `snapshot_before`: take the before-step snapshot (only traces show it; it costs a
        pass over the block pool per step). `stall_patience`: idle steps before `Stalled`
        (default `liveness.STALL_PATIENCE`)."""
        if workload.pd_pair is not None:
            raise UserError(f"workload {workload.name!r} is a P/D pair (pd_pair): its two "
                            "instances run together through `vtwin conform` "
                            "(conformance.sched.pd_pair), not one driver")
        self.system = system
        self.workload = workload
        self.config = workload.config
        self.integrity_every = integrity_every
        self.snapshot_before = snapshot_before
        self.max_steps = default_max_steps(workload) if max_steps is None else max_steps
        self.runner = FakeRunner(workload, workload.config.async_scheduling)
        # The connector's worker side (`transfers`): None without a connector.
        connector = workload.config.kv_connector
        self.transfers: TransferWorker | JobWorker | PDWorker | MultiWorker | None = (
            None if connector is None
            else JobWorker(connector) if connector.type == "offloading"
            else PDWorker(workload) if connector.type == "nixl"
            else MultiWorker(workload) if connector.type == "multi"
            else TransferWorker(connector))
        self._queue: deque[tuple[int, Scheduled, RunnerOutput]] = deque()
        self.arrivals = Arrivals(workload)
        self._tables: dict[str, BlockIds] = {}
        self._last_tables: dict[str, BlockIds] = {}
        self._hash_lengths: dict[str, int] = {}  # block hashes already recorded, per request
        self._report: ConnectorReport | None = None  # the applied batch's connector report
        self.liveness = LivenessMonitor(workload) if stall_patience is None else \
            LivenessMonitor(workload, stall_patience)
        # Whether another instance this one waits on is still at work (a P/D pair's peer:
        # `conformance.sched.pd_pair`); while it is, idle steps here are not a stall.
        self.waits_on_peer: Callable[[], bool] = lambda: False

    def _stalled(self, step: int, reason: str, detail: str) -> Stalled:
        return Stalled(self.system.name, self.workload.name, step, reason, detail,
                       self.system.state())

    def steps(self) -> Iterator[Step]:
        arrivals = self.arrivals
        aborts = deque(self.workload.aborts)
        controls = deque(self.workload.controls)
        parts = deque(session_parts(self.workload))
        grammars: list[tuple[int, str, bool]] = []  # (step compiled, request id, failed)
        busy = 0  # steps since the engine last went idle (a DP engine core's step counter)
        step = 0
        while arrivals or self.system.has_requests() or self._queue or controls or parts:
            if step >= self.max_steps:
                raise self._stalled(step - 1, "step-cap", f"workload {self.workload.name!r} "
                                    f"still running after {self.max_steps} steps")
            aborting = bool(aborts and aborts[0].step <= step)
            for request in arrivals.due(step):
                self.system.add_request(request, float(step))
                if request.grammar is not None:  # compiled in the background from now on
                    grammars.append((step + request.grammar.compile_steps,
                                     request.request_id, request.grammar.fails))
            for compiled in [g for g in grammars if g[0] <= step]:
                grammars.remove(compiled)
                compile_grammar(self.system, compiled[1], compiled[2])
            while parts and parts[0].arrival_step <= step:  # sessions' input parts, closes
                self.system.add_request(parts.popleft(), float(step))
            aborted: list[str] = []
            while aborts and aborts[0].step <= step:
                request_id = aborts.popleft().request_id
                if self.system.abort(request_id):
                    aborted.append(request_id)
                    self.runner.forget(request_id)
                    self._last_tables.pop(request_id, None)
            applied_controls: list[tuple[str, bool | None]] = []
            while controls and controls[0].step <= step:
                control = controls.popleft()
                applied_controls.append((control.action, apply_control(self.system, control)))
            if self.config.data_parallel:  # the DP engine core's cadence (`workloads.model`)
                throttle_prefills(self.system, busy % self.config.prefill_schedule_interval > 0)
            before = self.system.state() if self.snapshot_before else _NO_STATE
            if self.config.async_scheduling:
                scheduled, applied = self._async_body(step)
            else:
                scheduled, applied = self._sync_body(step)
            if self.integrity_every and step % self.integrity_every == 0:
                self.system.check_integrity()
            done = self._finish_step(step, before, scheduled, applied, tuple(aborted),
                                     tuple(applied_controls))
            yield done
            report = done.record.connector_report
            stall = self.liveness.observe(
                scheduled_tokens=done.record.total_num_scheduled_tokens,
                # A finished load is progress too: it unblocks its request. (Stores are not: a
            # connector that stores forever with nothing to run is what a stall looks like.)
                outputs=sum(1 for o in done.record.outputs
                            if o.new_token_ids or o.finish_reason is not None)
                + (0 if report is None else len(report.finished_loads)),
                # A pending control (an unpause, a reset) or a session's next input part may
                # be what the run waits for.
                aborting=aborting or bool(applied_controls),
                aborts_pending=bool(aborts) or bool(controls) or bool(parts) or bool(grammars)
                or self.waits_on_peer(),
                unfinished=self.system.has_requests() or bool(self._queue),
                state=self.system.state)
            if stall is not None:
                raise self._stalled(step, *stall)
            step += 1
            busy = busy + 1 if self.system.has_requests() or self._queue else 0

    def _sync_body(self, step: int) -> tuple[Scheduled | None, tuple[int, Update] | None]:
        if not self.system.has_requests():
            return None, None
        scheduled = self.system.schedule()
        self._capture_tables(scheduled)
        output = self._execute(step, scheduled)
        update = self._apply(scheduled, output)
        if self.config.num_spec_tokens and scheduled.total_num_scheduled_tokens > 0:
            self.system.update_draft_token_ids(self.runner.take_drafts(output))
        return scheduled, (step, update)

    def _async_body(self, step: int) -> tuple[Scheduled | None, tuple[int, Update] | None]:
        """A step whose grammar requests have a step in flight (`pending_grammar`) is sampled
        only after that step's output is applied: its drafts and bitmask wait for it."""
        scheduled = None
        deferred = False
        if self.system.has_requests():
            scheduled = self.system.schedule()
            self._capture_tables(scheduled)
            executed = scheduled.total_num_scheduled_tokens > 0
            deferred = executed and scheduled.pending_grammar
            if not deferred:
                self._queue.appendleft((step, scheduled, self._execute(step, scheduled)))
                if len(self._queue) < BATCH_QUEUE_DEPTH and (
                        executed or self.system.has_requests()):
                    return scheduled, None
        elif not self._queue:
            return None, None
        batch_step, batch, output = self._queue.pop()
        applied = (batch_step, self._apply(batch, output))
        if deferred and scheduled is not None:
            drafts = self.runner.drafts_for(scheduled) if self.config.num_spec_tokens else []
            scheduled = resolve_deferred(self.system, scheduled, drafts)
            self._queue.appendleft((step, scheduled,
                                    self._execute(step, scheduled, drafts_resolved=True)))
        return scheduled, applied

    def _execute(self, step: int, scheduled: Scheduled,
                 drafts_resolved: bool = False) -> RunnerOutput:
        """The model runner's output, with the connector worker's report of this step."""
        output = self.runner.execute(scheduled, drafts_resolved)
        worker = self.transfers
        if isinstance(worker, MultiWorker):
            if scheduled.remote is None or scheduled.jobs is None:
                return output
            return replace(output, connector=worker.run(step, scheduled.remote, scheduled.jobs))
        if isinstance(worker, PDWorker):
            if scheduled.remote is None:
                return output
            return replace(output, connector=worker.run(step, scheduled.remote))
        if worker is None or (scheduled.transfers is None and scheduled.jobs is None):
            return output
        transfers = scheduled.transfers or scheduled.jobs
        if isinstance(worker, JobWorker):
            assert isinstance(transfers, JobTransfers)
            return replace(output, connector=worker.run(step, transfers))
        assert isinstance(transfers, Transfers)
        return replace(output, connector=worker.run(step, transfers))

    def _capture_tables(self, scheduled: Scheduled) -> None:
        """Whole block tables of the scheduled requests whose table changed since this driver
        last recorded it. Tables only change when a request is scheduled (allocation, window
        recycling) or freed, so this is every change, at a fraction of the size."""
        tables = self.system.block_tables([rid for rid, _ in scheduled.num_scheduled_tokens])
        changed = {rid: ids for rid, ids in tables.items() if self._last_tables.get(rid) != ids}
        self._last_tables.update(changed)
        self._tables = changed

    def _apply(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        self._report = output.connector
        update = self.system.update(scheduled, output)
        for out in update.outputs:
            if out.finish_reason is not None:
                self.runner.forget(out.req_id)
                self._last_tables.pop(out.req_id, None)
        return update

    def _finish_step(self, step: int, before: SystemState, scheduled: Scheduled | None,
                     applied: tuple[int, Update] | None, aborted: tuple[str, ...],
                     controls: tuple[tuple[str, bool | None], ...] = ()) -> Step:
        after = self.system.state()
        events = self.system.take_events()
        update = None if applied is None else applied[1]
        self.arrivals.observe(step, () if update is None else (
            (o.req_id, o.new_token_ids, o.finish_reason is not None) for o in update.outputs),
            aborted)
        s = scheduled
        tables = self._tables if s is not None else {}
        self._tables = {}
        hashes = self._capture_hashes(s, update)
        record = StepRecord(
            step=step,
            scheduled=s is not None,
            scheduled_new=() if s is None else tuple(r.req_id for r in s.new_reqs),
            scheduled_cached=() if s is None else tuple(r.req_id for r in s.cached_reqs),
            scheduled_resumed=() if s is None else tuple(
                sorted(r.req_id for r in s.cached_reqs if r.resumed)),
            num_scheduled_tokens=() if s is None else s.num_scheduled_tokens,
            total_num_scheduled_tokens=0 if s is None else s.total_num_scheduled_tokens,
            num_computed_tokens=() if s is None else tuple(
                [(r.req_id, r.num_computed_tokens) for r in s.new_reqs]
                + [(r.req_id, r.num_computed_tokens) for r in s.cached_reqs]),
            num_output_tokens=() if s is None else tuple(
                (r.req_id, r.num_output_tokens) for r in s.cached_reqs),
            spec_tokens=() if s is None else s.spec_tokens,
            new_block_ids=() if s is None else tuple(
                [(r.req_id, r.block_ids) for r in s.new_reqs]
                + [(r.req_id, r.new_block_ids) for r in s.cached_reqs]),
            block_tables=tuple(tables.items()),
            new_block_hashes=tuple(hashes.items()),
            preempted=() if s is None else s.preempted_req_ids,
            finished=() if s is None else s.finished_req_ids,
            aborted=aborted,
            num_common_prefix_blocks=() if s is None else s.num_common_prefix_blocks,
            applied_step=None if applied is None else applied[0],
            outputs=() if update is None else update.outputs,
            blocks=after.blocks,
            num_running=len(after.running),
            num_waiting=len(after.waiting),
            prefix_cache=None if update is None else update.prefix_cache,
            connector_prefix_cache=None if update is None else update.connector_prefix_cache,
            events=events,
            scheduler_stats=None if update is None else update.scheduler_stats,
            free_head=after.free_head,
            cached_digest=cached_digest(after.cached_ids),
            transfers=None if s is None else (
                MultiTransfers(s.remote, s.jobs) if s.remote is not None and s.jobs is not None
                else s.transfers or s.jobs or s.remote),
            external_hits=() if s is None else s.external_hits,
            connector_report=self._report if applied is not None else None,
            cpu_blocks=after.cpu_blocks,
            encoder_inputs=() if s is None else s.encoder_inputs,
            freed_encoder_ids=() if s is None else s.freed_encoder_ids,
            encoder_input_stats=None if s is None else s.encoder_input_stats,
            grammar_rows=() if s is None else s.grammar_rows,
            encoder_cache=after.encoder_cache,
            controls=controls,
            replay_starts=() if s is None else tuple(
                (r.req_id, r.replay_start) for r in s.new_reqs if r.replay_start),
            block_copies=() if s is None else s.block_copies,
            has_sync_kv_loads=s is not None and s.has_sync_kv_loads,
        )
        return Step(before, record, events)

    def _capture_hashes(self, scheduled: Scheduled | None,
                        update: Update | None) -> dict[str, tuple[str, ...]]:
        """Block hashes added since the last record, for every request scheduled or updated
        in this step (hashes grow only when a request is added or gets tokens)."""
        ids = [] if scheduled is None else [rid for rid, _ in scheduled.num_scheduled_tokens]
        if update is not None:
            ids += [o.req_id for o in update.outputs]
        if not ids:
            return {}
        lengths = self._hash_lengths
        hashes = self.system.block_hashes({rid: lengths.get(rid, 0) for rid in ids})
        for rid, new in hashes.items():
            lengths[rid] = lengths.get(rid, 0) + len(new)
        return hashes
