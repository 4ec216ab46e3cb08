"""`JobBook`: the OffloadingConnector's jobs in flight and what watches them.

Loads and stores share one id counter. A job is done once every worker has reported it: a
load's chunks are then unpinned, a store's become readable. A finished request's store reads
GPU blocks the scheduler may hand out again, so those blocks are watched and a store reading
one that is handed out is flushed (the worker finishes it before the step runs). A load's
chunks are remembered while it is in flight (with prefix caching): a request hitting one waits.
A reset discards every job; reports of jobs made before it are ignored (from 0.33 they are
still awaited: the reset's fence keeps the engine stepping until every one has come in).
"""

from __future__ import annotations

from impl.connector.offloading.jobs import JobStatus, TransferJob
from impl.connector.offloading.keys import OffloadKey
from impl.connector.offloading.manager import CPUOffloadingManager
from impl.connector.offloading.request_state import RequestOffload
from impl.connector.types import KVConnectorOutput
from vtwin.errors import IntegrityError, ReleaseCheckFailed

FULL_WALK_EVERY = 64
"""`check_integrity` walks the manager's whole catalogue on its first call and every this many
calls after (a walk over a 40,000-chunk tier is ~90 ms, every step a lockstep run's cost many
times over); the calls between check its counters, O(1). A corruption is caught within 64
steps, as `PoolWatch` proves upstream's pool states."""


class JobBook:
    manager: CPUOffloadingManager
    requests: dict[str, RequestOffload]

    def __init__(self, enable_prefix_caching: bool) -> None:
        self.jobs: dict[int, JobStatus] = {}
        self.job_counter = 0
        self.stale_job_threshold = 0  # jobs below it were made before a reset: ignored
        # 0.33 (`Behaviour.offloading_reset_fence`): job -> worker reports still owed, for the
        # jobs a reset flushed; the engine keeps stepping until the fence is empty.
        self.reset_fence: dict[int, int] = {}
        # Block id -> store jobs reading it, for finished requests and windowed groups
        # (whose blocks may be handed out again while the store is in flight).
        self.watched_blocks: dict[int, set[int]] = {}
        # Chunks a load in flight reads (prefix caching on): a request hitting one waits.
        self.chunks_being_loaded: set[OffloadKey] | None = (
            set() if enable_prefix_caching else None)
        self.batch_loads: dict[int, TransferJob] = {}
        self.batch_flush: set[int] = set()
        self.batch_allocated: set[int] = set()
        self.integrity_calls = 0

    def _new_job_id(self) -> int:
        job_id = self.job_counter
        self.job_counter += 1
        return job_id

    def update_connector_output(self, output: KVConnectorOutput) -> None:
        """Jobs the worker finished: loads unpin their chunks, stores make theirs readable."""
        for job_id, count in output.completed_jobs:
            if job_id < self.stale_job_threshold:
                self._release_fence(job_id, count)
                continue
            status = self.jobs[job_id]
            status.pending_workers -= count
            if status.pending_workers > 0:
                continue
            state = self.requests[status.req_id]
            if status.is_store:
                self.manager.complete_store(list(status.keys))
            else:
                self.manager.complete_load(list(status.keys))
                if self.chunks_being_loaded:
                    self.chunks_being_loaded.difference_update(status.keys)
            if self.watched_blocks:
                self._unwatch(job_id, status.fence)
                if state.request.is_finished():
                    self._unwatch(job_id, status.deferred_fence)
            del self.jobs[job_id]
            state.jobs.discard(job_id)
            if state.finished_signalled and not state.jobs:
                del self.requests[status.req_id]

    def _unwatch(self, job_id: int, block_ids: tuple[int, ...]) -> None:
        """Stop watching `block_ids` for `job_id`. A windowed store can list one block twice
        (the window gave a freed block back to the same request, and the mirrored block table
        still holds it where it was): upstream then finds the block unwatched the second time
        and crashes (a KeyError), whether no job watches it any more or only other jobs do;
        the twin stops alike."""
        for block_id in block_ids:
            watchers = self.watched_blocks.get(block_id)
            if watchers is None or job_id not in watchers:
                whom = "no job" if watchers is None else "only other jobs"
                raise ReleaseCheckFailed("offloading-fence-twice", (
                    f"store job {job_id} unwatches GPU block {block_id}, which {whom} "
                    "watch (it listed the block twice)"))
            watchers.remove(job_id)
            if not watchers:
                del self.watched_blocks[block_id]

    def _release_fence(self, job_id: int, count: int) -> None:
        """A report of a job a reset flushed: one fewer owed (nothing without a fence)."""
        owed = self.reset_fence.get(job_id)
        if owed is None:
            return
        if owed <= count:
            del self.reset_fence[job_id]
        else:
            self.reset_fence[job_id] = owed - count

    # -- state -----------------------------------------------------------------------------
    def has_pending_stores(self) -> bool:
        """Jobs in flight, or reports a reset's fence still waits for: the engine keeps
        stepping to hear of them."""
        return bool(self.jobs) or bool(self.reset_fence)

    def cpu_counts(self) -> tuple[int, int, int]:
        """The CPU tier's chunks: (pinned by a load or being written, idle, slots free)."""
        manager = self.manager
        empty = manager.slots.num_free()
        return (manager.slots.capacity - empty - manager.num_idle, manager.num_idle, empty)

    def gpu_pins(self) -> dict[int, int]:
        return {}  # the connector holds no reference on a GPU block (it flushes instead)

    def loading_finished(self) -> set[str]:
        """Finished requests whose load is still in flight."""
        return {status.req_id for status in self.jobs.values()
                if not status.is_store and self.requests[status.req_id].request.is_finished()}

    def check_integrity(self) -> None:
        """The manager's own check (its whole walk every `FULL_WALK_EVERY` calls, its counters
        between), then every job belongs to a known request that lists it, a request has one
        asynchronous load alone or stores (beside a sync load: `sync_loads`), the watched and
        loading sets match the jobs in flight, and the
        reset fence holds only jobs made before the reset that still owe reports."""
        walk = self.integrity_calls % FULL_WALK_EVERY == 0
        self.integrity_calls += 1
        if walk:
            self.manager.check_integrity()
        else:
            self.manager.check_counts()
        listed: set[int] = set()
        for req_id, state in self.requests.items():
            loads = [j for j in state.jobs if j in self.jobs and not self.jobs[j].is_store
                     and not self.jobs[j].is_sync_load]
            if (not state.jobs <= self.jobs.keys() or (loads and len(state.jobs) > 1)
                    or any(self.jobs[j].req_id != req_id for j in state.jobs)):
                raise IntegrityError(f"offloading: {req_id}'s jobs {sorted(state.jobs)} are "
                                     "unknown, another request's, or mix an async load with "
                                     "others")
            listed |= state.jobs
        if listed != self.jobs.keys():
            raise IntegrityError(f"offloading: jobs {sorted(self.jobs.keys() ^ listed)} are "
                                 "in flight without a request, or the other way round")
        for block_id, watchers in self.watched_blocks.items():
            if not watchers or not watchers <= self.jobs.keys():
                raise IntegrityError(f"offloading: block {block_id} is watched for jobs "
                                     f"{sorted(watchers)} not in flight")
        if any(job_id >= self.stale_job_threshold or owed <= 0
               for job_id, owed in self.reset_fence.items()):
            raise IntegrityError(f"offloading: the reset fence {self.reset_fence} holds a job "
                                 "made after the reset, or owes no report")
        if self.chunks_being_loaded is not None:
            loading = {key for status in self.jobs.values()
                       if not status.is_store and not status.is_sync_load for key in status.keys}
            if loading != self.chunks_being_loaded:
                raise IntegrityError("offloading: the chunks being loaded are not those of "
                                     "the loads in flight")
