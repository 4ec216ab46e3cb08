"""The P/D connector's worker and its modelled peer as the harness plays them
(`conformance.sched.pd_worker`): pulls landing latency steps later and only when awaited, a
whole pull failing with its blocks reported invalid, reads of held prefills; and a step
record's pulls, reads and handed-on parameters round-tripping through the record's JSON."""

from __future__ import annotations

from conformance.sched.pd_worker import PDWorker
from conformance.sched.record_connector import (
    connector_fields,
    connector_json,
    output_json,
    output_of,
)
from conformance.systems.protocol import HandedOn, TokenOutput
from conformance.systems.transfer_records import ConnectorReport, PullOrder, RemoteTransfers
from workloads.model import EngineConfig, KVConnectorConfig, RequestSpec, Workload
from workloads.pd import KVTransferSpec


def workload(load: int = 1, send: int = 1, failing: tuple[str, ...] = (),
             lost: tuple[str, ...] = ()) -> Workload:
    requests = tuple(RequestSpec(rid, 0, (1, 2, 3), 2, kv_transfer=KVTransferSpec(
        "decode", load_fails=rid in failing, pull_lost=rid in lost)) for rid in ("a", "b", "c"))
    config = EngineConfig(kv_connector=KVConnectorConfig(
        "nixl", load_latency_steps=load, send_latency_steps=send))
    return Workload("w", "", config, requests)


def orders(pulls: tuple[PullOrder, ...] = (), reads: tuple[str, ...] = ()) -> RemoteTransfers:
    return RemoteTransfers(pulls, reads, (), ())


def pull(rid: str, blocks: tuple[int, ...] = (5, 6), awaiting: bool = True) -> PullOrder:
    return PullOrder(rid, (blocks,) if blocks else (), (0,) if blocks else (), awaiting)


def test_awaited_pulls_land_latency_steps_later_and_others_report_nothing() -> None:
    worker = PDWorker(workload(load=2))
    assert worker.run(0, orders((pull("a"), pull("b", (), awaiting=False)))) == \
        ConnectorReport()
    assert worker.busy()
    assert worker.run(1, orders((pull("c"),))) == ConnectorReport()
    assert worker.run(2, orders()) == ConnectorReport(finished_loads=("a",))
    assert worker.run(3, orders()) == ConnectorReport(finished_loads=("c",))
    assert not worker.busy()


def test_a_failing_pull_lands_failed_with_its_blocks_invalid() -> None:
    worker = PDWorker(workload(load=0, failing=("b",)))
    assert worker.run(0, orders((pull("a", (1,)), pull("b", (7, 8))))) == ConnectorReport(
        finished_loads=("a", "b"), invalid_block_ids=(7, 8), failed_loads=("b",))


def test_a_lost_pull_never_reports() -> None:
    worker = PDWorker(workload(load=0, lost=("b",)))
    assert worker.run(0, orders((pull("a"), pull("b")))) == ConnectorReport(
        finished_loads=("a",))
    assert worker.run(5, orders()) == ConnectorReport() and not worker.busy()


def test_held_prefills_are_read_send_latency_steps_after_they_are_announced() -> None:
    worker = PDWorker(workload(send=0))
    assert worker.run(4, orders(reads=("p", "q"))) == ConnectorReport(
        finished_sends=("p", "q"))
    worker = PDWorker(workload(send=3))
    worker.run(4, orders(reads=("p",)))
    assert [worker.run(s, orders()).finished_sends for s in (5, 6, 7)] == [(), (), ("p",)]


def test_pulls_reads_and_handed_on_parameters_round_trip_through_a_record() -> None:
    transfers = RemoteTransfers((pull("a"), pull("z", (), awaiting=False)), ("p",), ("p",),
                                ("q",))
    report = ConnectorReport(finished_loads=("a",), invalid_block_ids=(5,),
                             finished_sends=("p",), failed_loads=("a",))
    fields = connector_fields(connector_json(transfers, (), report, None))
    assert fields == {"transfers": transfers, "connector_report": report}
    out = TokenOutput("p", (9,), "length", None, HandedOn(((1, 2),), 8, 3))
    assert output_of("p", output_json(out)) == out
    plain = TokenOutput("x", (), None, None)
    assert "handed_on" not in output_json(plain) and output_of("x", output_json(plain)) == plain
