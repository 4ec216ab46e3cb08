"""The OffloadingConnector's worker as the harness plays it (`conformance.sched.job_worker`):
latency per kind, order within a kind, flushes (a flushed job and every job of its kind before
it), finished loads by request, completions in job-id order; and a step record's jobs round-
tripping through the record's JSON."""

from __future__ import annotations

from conformance.sched.job_worker import JobWorker
from conformance.sched.record_connector import connector_fields, connector_json
from conformance.systems.transfer_records import ConnectorReport, JobTransfers, OffloadJob
from workloads.model import KVConnectorConfig


def job(job_id: int, req_id: str = "a") -> OffloadJob:
    return OffloadJob(job_id, req_id, (3, 4), (2,), (0,), (7,))


def step(loads: tuple[OffloadJob, ...] = (), stores: tuple[OffloadJob, ...] = (),
         flush: tuple[int, ...] = ()) -> JobTransfers:
    return JobTransfers(loads, stores, flush)


def config(load: int = 1, store: int = 1) -> KVConnectorConfig:
    return KVConnectorConfig("offloading", load_latency_steps=load, store_latency_steps=store)


def test_jobs_complete_latency_steps_later_loads_by_request() -> None:
    worker = JobWorker(config(load=2, store=0))
    assert worker.run(0, step(loads=(job(0, "b"),), stores=(job(1),))) == ConnectorReport(
        completed_jobs=(1,))
    assert worker.run(1, step()) == ConnectorReport()
    assert worker.run(2, step(stores=(job(2),))) == ConnectorReport(
        finished_loads=("b",), completed_jobs=(0, 2))
    assert not worker.busy()


def test_a_later_job_of_a_kind_never_finishes_before_an_earlier_one() -> None:
    worker = JobWorker(config(store=3))
    worker.run(0, step(stores=(job(0),)))
    worker.config = config(store=0)  # a faster second copy
    assert worker.run(1, step(stores=(job(1),))).completed_jobs == ()
    assert worker.run(3, step()).completed_jobs == (0, 1)


def test_a_flush_completes_its_job_and_those_of_its_kind_before_it() -> None:
    worker = JobWorker(config(load=9, store=9))
    worker.run(0, step(loads=(job(0),), stores=(job(1), job(2))))
    worker.run(1, step(stores=(job(3),)))
    assert worker.run(2, step(flush=(2,))).completed_jobs == (1, 2)
    assert worker.busy()  # job 3 and the load are still in flight
    assert worker.run(3, step(flush=(0, 3))) == ConnectorReport(finished_loads=("a",),
                                                               completed_jobs=(0, 3))
    assert not worker.busy()


def test_a_records_jobs_round_trip_through_json() -> None:
    transfers = step(loads=(job(4, "c"),), stores=(job(5),), flush=(1, 2))
    report = ConnectorReport(finished_loads=("c",), completed_jobs=(4,))
    data = connector_json(transfers, (), report, None)
    assert data["jobs"]["load_jobs"][0] == {"job_id": 4, "req_id": "c", "gpu_blocks": [3, 4],
                                            "group_sizes": [2], "block_indices": [0],
                                            "cpu_slots": [7]}
    assert connector_fields(data) == {"transfers": transfers, "connector_report": report}
