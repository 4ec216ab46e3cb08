"""`MultiWorker`: a MultiConnector's worker side, each connector's part played by its own
worker (`PDWorker` for the NIXL connector, `JobWorker` for the OffloadingConnector) and their
reports merged into one, as upstream's MultiConnector worker merges its connectors' results.

A request held by two connectors at once would be reported finished sending only when both
are done (`extra_async_saves`); the NIXL connector with the OffloadingConnector never holds a
request twice (the CPU tier never delays a free), so no such request arises here.
"""

from __future__ import annotations

from dataclasses import replace

from conformance.sched.job_worker import JobWorker
from conformance.sched.pd_worker import PDWorker
from conformance.systems.transfer_records import ConnectorReport, JobTransfers, RemoteTransfers
from workloads.model import Workload


class MultiWorker:
    def __init__(self, workload: Workload) -> None:
        connector = workload.config.kv_connector
        assert connector is not None and connector.type == "multi"
        nixl, offloading = connector.part("nixl"), connector.part("offloading")
        assert nixl is not None and offloading is not None
        self.pd = PDWorker(replace(workload, config=replace(workload.config,
                                                            kv_connector=nixl)))
        self.jobs = JobWorker(offloading)

    def run(self, step: int, remote: RemoteTransfers, jobs: JobTransfers) -> ConnectorReport:
        pulled = self.pd.run(step, remote)
        copied = self.jobs.run(step, jobs)
        return ConnectorReport(
            finished_loads=tuple(sorted({*pulled.finished_loads, *copied.finished_loads})),
            invalid_block_ids=pulled.invalid_block_ids,
            completed_jobs=copied.completed_jobs,
            finished_sends=pulled.finished_sends,
            failed_loads=pulled.failed_loads)

    def busy(self) -> bool:
        return self.pd.busy() or self.jobs.busy()
