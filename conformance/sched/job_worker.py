"""`JobWorker`: the OffloadingConnector's worker side, played deterministically.

Both systems of a lockstep run get the same worker, so a job finishing is a fact of the
workload, not of timing. The rules follow upstream's offloading worker:

* a load or store job issued in step s completes in the output of step s + latency (0: the
  same step's output); jobs of one kind complete in order (one copy stream each);
* a sync load (0.33's `sync_load_budget_bytes`) completes in the output of its own step,
  ahead of the queue (upstream submits it expedited and waits for it before the forward
  pass), and does not name its request as finished receiving (the request never waited);
* a job the step lists in `jobs_to_flush` completes in that step's output (the worker waits
  for it before the step runs), and with it every job of its kind issued before it;
* every finished job is reported by id, in job-id order; a finished load also reports its
  request as finished receiving (an aborted request too: the scheduler then frees its blocks);
* the OffloadingConnector's worker never fails a transfer, so no failures are planned.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from conformance.systems.transfer_records import ConnectorReport, JobTransfers
from workloads.model import KVConnectorConfig


@dataclass(frozen=True, slots=True)
class _InFlight:
    job_id: int
    req_id: str
    due_step: int


class JobWorker:
    def __init__(self, config: KVConnectorConfig) -> None:
        self.config = config
        self._loads: deque[_InFlight] = deque()
        self._stores: deque[_InFlight] = deque()

    def run(self, step: int, transfers: JobTransfers) -> ConnectorReport:
        """Issue this step's jobs, then report what has finished by the step's end."""
        synced = [_InFlight(job.job_id, job.req_id, step)
                  for job in transfers.load_jobs if job.sync]
        for job in transfers.load_jobs:
            if not job.sync:
                self._loads.append(_InFlight(job.job_id, job.req_id,
                                             step + self.config.load_latency_steps))
        for job in transfers.store_jobs:
            self._stores.append(_InFlight(job.job_id, job.req_id,
                                          step + self.config.store_latency_steps))
        flush = set(transfers.jobs_to_flush)
        loads = _complete(self._loads, step, flush)
        stores = _complete(self._stores, step, flush)
        done = sorted(loads + stores + synced, key=lambda job: job.job_id)
        return ConnectorReport(finished_loads=tuple(sorted({job.req_id for job in loads})),
                               completed_jobs=tuple(job.job_id for job in done))

    def busy(self) -> bool:
        """Jobs still in flight (the engine must keep stepping to hear of them)."""
        return bool(self._loads or self._stores)


def _complete(queue: deque[_InFlight], step: int, flush: set[int]) -> list[_InFlight]:
    """Jobs of one kind done by `step`: those due, and everything up to the last flushed."""
    last_flushed = max((i for i, job in enumerate(queue) if job.job_id in flush), default=-1)
    done: list[_InFlight] = []
    while queue and (len(done) <= last_flushed or queue[0].due_step <= step):
        done.append(queue.popleft())
    return done
