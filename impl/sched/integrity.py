"""The scheduler's integrity check: every request in exactly one place, in the right state.

Comparison against upstream only sees what a step outputs; a scheduler can keep a request in
two queues, or lose one from all of them, for many steps before any output shows it. These
invariants catch that at the step it happens. They raise `IntegrityError` (not `assert`), so
they hold under `python -O` too.

| where a request is      | its status                      | its KV blocks | computed tokens     |
| ----------------------- | ------------------------------- | ------------- | ------------------- |
| `running`               | RUNNING                         | any           | <= tokens + drafts  |
| `waiting`               | WAITING, PREEMPTED              | none          | 0                   |
| `kv_holding_waiting`    | WAITING_FOR_REMOTE_KVS          | its own       | hit + loaded tokens |
|                         | WAITING, PREEMPTED (loaded)     | its own, or   | > 0, or             |
|                         |                                 | none          | 0 (load failed)     |
| nowhere (finished)      | not in `requests` any more      | none          |                     |
| pinned (continuum)      | finished, still in `requests`   | its own       | one pin per job     |
| loading, finished       | finished, still in `requests`   | its own       | (aborted mid-load)  |

Sessions waiting for their next input part (`WAITING_FOR_STREAMING_REQ`) are counted apart (their
seats); the count must match the queues. A request waiting for its grammar
(`WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`) never ran: it is in `waiting`, has computed nothing,
and is counted among the skipped (`deferred_waiting`).

With a connector, GPU blocks may also be held by its transfers and by frees deferred past a
step in flight: the pool's reference counts are checked against all of those holders, and the
CPU tier's pool against the connector's own pins. The loads reported finished or failed and
not yet taken up name only requests still waiting for their load (an abort drops its id).
"""

from __future__ import annotations

from collections.abc import Iterable

from impl.sched.request import Request, RequestStatus
from impl.sched.state import SchedulerState
from vtwin.errors import IntegrityError

_WAITING_STATUSES = frozenset({RequestStatus.WAITING, RequestStatus.WAITING_FOR_REMOTE_KVS,
                               RequestStatus.WAITING_FOR_STREAMING_REQ,
                               RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR,
                               RequestStatus.PREEMPTED})


def check_scheduler_integrity(scheduler: SchedulerState) -> None:
    """Raise `IntegrityError` naming the first broken invariant (then check the KV cache)."""
    places: dict[str, str] = {}
    _place(places, scheduler.running, "running")
    _place(places, scheduler.waiting, "waiting")
    _place(places, scheduler.kv_holding_waiting, "kv_holding_waiting")
    pinned = _check_pins(scheduler, places) | _loading_finished(scheduler)
    known = set(scheduler.requests) - pinned
    if set(places) != known:
        lost = sorted(known - set(places))
        stray = sorted(set(places) - known)
        raise IntegrityError(f"scheduler: requests in no queue {lost}, queued but unknown "
                             f"{stray}")
    if len(scheduler.running) > scheduler.max_num_running_reqs:
        raise IntegrityError(f"scheduler: {len(scheduler.running)} running requests, more "
                             f"than max_num_seqs={scheduler.max_num_running_reqs}")
    manager = scheduler.kv_cache_manager
    for request in scheduler.running:
        if request.status != RequestStatus.RUNNING:
            raise IntegrityError(f"scheduler: {request.request_id} is in running with status "
                                 f"{request.status.name}")
        limit = request.num_tokens_with_spec + request.num_output_placeholders
        if not 0 <= request.num_computed_tokens <= limit:
            raise IntegrityError(f"scheduler: {request.request_id} computed "
                                 f"{request.num_computed_tokens} of {limit} tokens")
    for request in _chain(scheduler.waiting, scheduler.kv_holding_waiting):
        if request.status not in _WAITING_STATUSES:
            raise IntegrityError(f"scheduler: {request.request_id} is waiting with status "
                                 f"{request.status.name}")
        holds = (request.num_computed_tokens > 0
                 or request.status == RequestStatus.WAITING_FOR_REMOTE_KVS)
        if holds and places[request.request_id] != "kv_holding_waiting":
            raise IntegrityError(f"scheduler: {request.request_id} ({request.status.name}, "
                                 f"{request.num_computed_tokens} computed) is in waiting")
        if not holds and any(manager.get_block_ids(request.request_id)):
            raise IntegrityError(f"scheduler: waiting {request.request_id} holds KV blocks")
        if request.status == RequestStatus.WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR and (
                request.grammar is None or request.num_computed_tokens
                or request.request_id not in scheduler.deferred_waiting):
            raise IntegrityError(f"scheduler: {request.request_id} waits for a grammar (has one: "
                                 f"{request.grammar is not None}) with "
                                 f"{request.num_computed_tokens} tokens computed, skipped: "
                                 f"{request.request_id in scheduler.deferred_waiting}")
    streaming = sum(1 for r in _chain(scheduler.waiting, scheduler.kv_holding_waiting)
                    if r.status == RequestStatus.WAITING_FOR_STREAMING_REQ)
    if streaming != scheduler.num_waiting_for_streaming_input:
        raise IntegrityError(f"scheduler: {streaming} sessions wait for input, but the count "
                             f"says {scheduler.num_waiting_for_streaming_input}")
    _check_reported_loads(scheduler, places)
    extra: dict[int, int] = {}
    connector = getattr(scheduler, "connector", None)
    if connector is not None:
        extra = connector.gpu_pins()
        connector.check_integrity()
    for _, blocks in getattr(scheduler, "deferred_frees", ()):
        for block in blocks:
            extra[block.block_id] = extra.get(block.block_id, 0) + 1
    manager.check_integrity(extra)


def _check_reported_loads(scheduler: SchedulerState, places: dict[str, str]) -> None:
    """Loads the worker reported finished or failed wait in two sets until the waiting request
    is looked at again; an id there whose request left the queue (aborted, say) would make a
    later request under the same id look loaded."""
    for name, ids in (("finished", scheduler.finished_recving_kv_req_ids),
                      ("failed", scheduler.failed_recving_kv_req_ids)):
        for rid in ids:
            request = scheduler.requests.get(rid)
            if (request is None or places.get(rid) != "kv_holding_waiting"
                    or request.status != RequestStatus.WAITING_FOR_REMOTE_KVS):
                raise IntegrityError(f"scheduler: load of {rid} reported {name}, but it is not "
                                     "a request waiting for its load")


def _check_pins(scheduler: SchedulerState, places: dict[str, str]) -> set[str]:
    """Pins (continuum) are finished requests kept in `requests` with their blocks, in no
    queue, at most one per job, none past its expiry (the step's start released those)."""
    policy = scheduler.continuum
    if policy is None:
        return set()
    pinned: set[str] = set()
    jobs: set[str | None] = set()
    for pin in policy.pins:
        request = pin.request
        rid = request.request_id
        if rid in places or scheduler.requests.get(rid) is not request:
            raise IntegrityError(f"scheduler: pinned {rid} is queued in {places.get(rid)} or "
                                 "missing from requests")
        if not request.is_finished() or request.job_id in jobs or request.is_last_step:
            raise IntegrityError(f"scheduler: pin of {rid} (job {request.job_id}, "
                                 f"{request.status.name}) is not one finished non-final turn "
                                 "per job")
        if pin.expires_ms <= policy.now_ms:
            raise IntegrityError(f"scheduler: pin of {rid} expired at {pin.expires_ms} ms and "
                                 f"was not released by {policy.now_ms} ms")
        pinned.add(rid)
        jobs.add(request.job_id)
    return pinned


def _loading_finished(scheduler: SchedulerState) -> set[str]:
    """Finished requests whose load is still in flight: they keep their blocks (and their
    place in `requests`) until the worker reports the load."""
    connector = getattr(scheduler, "connector", None)
    if connector is None:
        return set()
    loading: set[str] = connector.loading_finished()
    for rid in loading:
        request = scheduler.requests.get(rid)
        if request is None or not request.is_finished():
            raise IntegrityError(f"scheduler: load of {rid} marked finished, but the request "
                                 "is not a finished one")
    return loading


def _place(places: dict[str, str], queue: Iterable[Request], name: str) -> None:
    for request in queue:
        other = places.setdefault(request.request_id, name)
        if other != name or request.is_finished():
            raise IntegrityError(f"scheduler: {request.request_id} ({request.status.name}) is "
                                 f"in {name} and {other}")
        places[request.request_id] = name


def _chain(*queues: Iterable[Request]) -> Iterable[Request]:
    for queue in queues:
        yield from queue
