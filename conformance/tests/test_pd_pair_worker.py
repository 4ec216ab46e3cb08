"""The worker between the two instances of a P/D pair (`conformance.sched.pd_pair_worker`):
a pull lands on the decode side latency steps after it is ordered and the prefill side hears
of it (frees its held blocks) a notification later; an empty order releases the prefill side
at once; push mode writes only once both sides are ready; failing and lost transfers."""

from __future__ import annotations

from conformance.sched.pd_pair_worker import PairWorker
from conformance.systems.transfer_records import ConnectorReport, PullOrder, RemoteTransfers
from workloads.model import EngineConfig, KVConnectorConfig, RequestSpec, Workload
from workloads.pd import KVTransferSpec


def workload(load: int = 1, send: int = 1, failing: tuple[str, ...] = (),
             lost: tuple[str, ...] = ()) -> Workload:
    requests = tuple(RequestSpec(rid, 0, (1, 2, 3), 2, kv_transfer=KVTransferSpec(
        "decode", load_fails=rid in failing, pull_lost=rid in lost)) for rid in ("a", "b"))
    config = EngineConfig(kv_connector=KVConnectorConfig(
        "nixl", load_latency_steps=load, send_latency_steps=send))
    return Workload("w", "", config, requests)


def decode_orders(*pulls: PullOrder,
                  registrations: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()
                  ) -> RemoteTransfers:
    return RemoteTransfers(pulls, (), (), (), registrations)


def prefill_orders(reads: tuple[str, ...] = (),
                   pushes: tuple[str, ...] = ()) -> RemoteTransfers:
    return RemoteTransfers((), reads, (), (), (), tuple((rid, ((9,),)) for rid in pushes))


def test_a_pull_lands_then_the_prefill_side_hears_a_notification_later() -> None:
    worker = PairWorker(workload(load=2, send=0))  # a notification takes at least a step
    assert worker.run_prefill(0, prefill_orders(reads=("a",))) == ConnectorReport()
    assert worker.run_decode(3, decode_orders(PullOrder("a", ((5, 6),), (0,), True))) == \
        ConnectorReport()
    assert worker.run_decode(5, decode_orders()) == ConnectorReport(finished_loads=("a",))
    assert worker.run_prefill(5, prefill_orders()) == ConnectorReport()
    assert worker.run_prefill(6, prefill_orders()) == ConnectorReport(finished_sends=("a",))
    assert not worker.busy()


def test_an_empty_order_releases_the_prefill_side_without_a_pull() -> None:
    worker = PairWorker(workload(send=2))
    assert worker.run_decode(4, decode_orders(PullOrder("a", (), (), False))) == \
        ConnectorReport()
    assert worker.run_prefill(5, prefill_orders()) == ConnectorReport()
    assert worker.run_prefill(6, prefill_orders()) == ConnectorReport(finished_sends=("a",))


def test_a_failing_pull_reports_its_blocks_invalid_and_still_releases() -> None:
    worker = PairWorker(workload(load=0, failing=("b",)))
    assert worker.run_decode(0, decode_orders(PullOrder("b", ((7, 8),), (0,), True))) == \
        ConnectorReport(finished_loads=("b",), invalid_block_ids=(7, 8), failed_loads=("b",))
    assert worker.run_prefill(1, prefill_orders()) == ConnectorReport(finished_sends=("b",))


def test_a_lost_pull_never_lands_and_never_releases() -> None:
    worker = PairWorker(workload(load=0, lost=("a",)))
    worker.run_decode(0, decode_orders(PullOrder("a", ((5,),), (0,), True)))
    assert worker.run_decode(9, decode_orders()) == ConnectorReport()
    assert worker.run_prefill(9, prefill_orders()) == ConnectorReport()


def test_push_mode_writes_once_both_sides_are_ready() -> None:
    """The prefill side hands its blocks out at step 2, the decode side registers at step 4:
    the write starts then and lands a load latency later."""
    worker = PairWorker(workload(load=1))
    assert worker.run_prefill(2, prefill_orders(reads=("a",), pushes=("a",))) == \
        ConnectorReport()
    registered = decode_orders(PullOrder("a", ((3, 4),), (), False),
                               registrations=(("a", ((3, 4),)),))
    assert worker.run_decode(4, registered) == ConnectorReport()  # no empty-order release
    assert worker.run_decode(5, decode_orders()) == ConnectorReport(finished_loads=("a",))
    assert worker.run_prefill(6, prefill_orders()) == ConnectorReport(finished_sends=("a",))


def test_push_mode_registration_first_then_the_prefill_side_hands_out() -> None:
    worker = PairWorker(workload(load=0))
    worker.run_decode(1, decode_orders(registrations=(("b", ((3,),)),)))
    assert worker.run_prefill(3, prefill_orders(pushes=("b",))) == ConnectorReport()
    assert worker.run_decode(3, decode_orders()) == ConnectorReport(finished_loads=("b",))


def test_a_request_the_router_dropped_releases_the_prefill_side() -> None:
    worker = PairWorker(workload())
    worker.release("a", 7)
    assert worker.busy()
    assert worker.run_prefill(8, prefill_orders()) == ConnectorReport(finished_sends=("a",))
