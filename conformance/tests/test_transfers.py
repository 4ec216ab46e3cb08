"""The harness's transfer worker (`conformance.sched.transfers`): latency, order, flush on
preemption, loads reported by the current step's request lists, planned failures."""

from __future__ import annotations

import io
from pathlib import Path

from conformance.sched.transfers import TransferWorker
from conformance.systems.transfer_records import ConnectorReport, Transfers
from workloads.model import KVConnectorConfig, LoadFailure


def transfers(load: int = -1, store: int = -1, reqs: dict[int, tuple[str, ...]] | None = None,
              flush: bool = False, blocks: tuple[tuple[int, int], ...] = ((5, 1), (6, 2))
              ) -> Transfers:
    return Transfers(load, blocks if load >= 0 else (), store, ((9, 3),) if store >= 0 else (),
                     tuple(sorted((reqs or {}).items())), flush)


def test_a_transfer_completes_latency_steps_later_in_order() -> None:
    worker = TransferWorker(KVConnectorConfig(load_latency_steps=2, store_latency_steps=0))
    assert worker.run(0, transfers(load=0, store=0, reqs={0: ("a",)})) == ConnectorReport(
        (), (0,), ())
    assert worker.run(1, transfers(load=1, reqs={0: ("a",), 1: ("b",)})) == ConnectorReport()
    assert worker.run(2, transfers(reqs={0: ("a",), 1: ("b",)})).finished_loads == ("a",)
    assert worker.run(3, transfers(reqs={1: ("b",)})).finished_loads == ("b",)
    assert not worker.busy()


def test_a_later_event_never_finishes_before_an_earlier_one() -> None:
    worker = TransferWorker(KVConnectorConfig(store_latency_steps=3))
    worker.run(0, transfers(store=0))
    worker.config = KVConnectorConfig(store_latency_steps=0)  # a faster second copy
    assert worker.run(1, transfers(store=1)).finished_stores == ()
    assert worker.run(3, transfers()).finished_stores == (0, 1)


def test_a_flush_completes_everything_in_flight() -> None:
    worker = TransferWorker(KVConnectorConfig(load_latency_steps=9, store_latency_steps=9))
    worker.run(0, transfers(load=0, store=0, reqs={0: ("a",)}))
    report = worker.run(1, transfers(reqs={0: ("a",)}, flush=True))
    assert report == ConnectorReport(("a",), (0,), ())


def test_an_aborted_request_is_not_reported_and_failures_name_gpu_blocks() -> None:
    worker = TransferWorker(KVConnectorConfig(load_latency_steps=1, load_failures=(
        LoadFailure(0, 1), LoadFailure(0, 7))))
    worker.run(0, transfers(load=0, reqs={0: ("a", "b")}))
    report = worker.run(1, transfers(reqs={0: ("b",)}))
    assert report == ConnectorReport(("b",), (), (6,))


def test_the_report_plots_the_cpu_tier_and_the_blocks_moved(tmp_path: Path) -> None:
    """A run with the CPU tier (twin against itself: no upstream needed) shows both tiers'
    three block counts and the blocks loaded and stored per step; one without shows neither."""
    from conformance.sched.conform import run_conform
    from conformance.sched.report.writer import write_report

    for workload, expected in (("offload-sessions", 1), ("decode-heavy", 0)):
        run = run_conform([workload], system="impl", against="impl", stream=io.StringIO())
        assert run.ok
        page = write_report(run, tmp_path / workload, None, meta={})
        html = page.read_text()
        assert html.count("CPU tier blocks") == expected
        assert html.count("blocks moved per step") == expected
