"""The NIXL connector's scheduler side in push mode (`impl.connector.nixl_push`), step by step
with exact block ids: a decode-side request registers the blocks its local hit does not cover
and waits for the peer's write; a request told no external tokens registers nothing and
releases the peer only when it finishes; a prefill hands the worker the blocks to write and
keeps them until written, which also keeps the engine stepping."""

from __future__ import annotations

import pytest

from impl.connector.nixl_metadata import PullOrder
from impl.connector.nixl_push import NixlPushConnectorScheduler
from impl.connector.types import FinishedTransfer, KVConnectorOutput, NixlSettings
from impl.sched.request import RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.test_nixl_connector import BLOCK, decode, prefill, run_step
from vtwin.errors import IntegrityError


def push_scheduler(num_blocks: int = 24, policy: str = "fail") -> Scheduler:
    return make_scheduler(num_blocks, block_size=BLOCK, max_num_batched_tokens=64,
                          kv_connector=NixlSettings(policy, transfer_mode="push"))


def test_a_decode_request_registers_its_blocks_and_waits_for_the_write() -> None:
    scheduler = push_scheduler()
    scheduler.add_request(make_request("warm", range(10, 19), BLOCK, max_tokens=1))
    run_step(scheduler)  # caches blocks 1 and 2 (8 tokens)
    scheduler.add_request(decode("d", range(10, 22)))
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {}
    assert meta.push_registrations == {"d": ([3],)}  # 3: warm's freed tail
    # The order lists the blocks too, with no cached counts and not awaited by the worker.
    assert meta.reqs_to_recv == {"d": PullOrder(([3],), (), False)}
    assert scheduler.requests["d"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    scheduler.finish_requests("d", RequestStatus.FINISHED_ABORTED)
    connector = scheduler.connector
    assert connector is not None and connector.loading_finished() == {"d"}  # write in flight
    _, meta, _ = run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    assert meta.push_registrations == {} and meta.reqs_to_recv == {}  # registered once
    assert "d" not in scheduler.requests


def test_a_written_request_recomputes_its_last_token_and_registers_once() -> None:
    scheduler = push_scheduler()
    scheduler.add_request(decode("d", range(10, 20)))
    _, meta, _ = run_step(scheduler)
    assert meta.push_registrations == {"d": ([1, 2, 3],)}
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    scheduled, meta, outputs = run_step(scheduler)
    assert scheduled == {"d": 1} and meta.push_registrations == {}
    assert [(o.request_id, o.kv_transfer_params) for o in outputs] == [("d", None)]


def test_a_request_told_no_external_tokens_releases_the_peer_when_it_finishes() -> None:
    """Unlike pull mode, which orders an empty pull at once, push mode registers nothing and
    keeps the flag: the empty order that frees the peer's blocks goes out at the finish."""
    scheduler = push_scheduler()
    request = decode("d", range(10, 20), max_tokens=2)
    request.skip_reading_prefix_cache = True
    scheduler.add_request(request)
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {"d": 10}
    assert meta.reqs_to_recv == {} and meta.push_registrations == {}
    assert request.kv_transfer is not None and request.kv_transfer.do_remote_prefill
    _, meta, outputs = run_step(scheduler)
    assert meta.reqs_to_recv == {} and [o.finish_reason for o in outputs] == ["length"]
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"d": PullOrder((), (), False)}


def test_a_prefill_hands_the_worker_its_blocks_and_holds_them_until_written() -> None:
    scheduler = push_scheduler()
    scheduler.add_request(prefill("p", range(10, 21)))
    scheduled, meta, outputs = run_step(scheduler)
    assert scheduled == {"p": 11} and meta.reqs_in_batch == {"p"}
    assert [o.kv_transfer_params for o in outputs] == [FinishedTransfer(((1, 2, 3),), 11, 0)]
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_send == ["p"] and meta.push_finished_blocks == {"p": ([1, 2, 3],)}
    assert scheduler.has_requests()
    _, meta, _ = run_step(scheduler)
    assert meta.push_finished_blocks == {}  # handed out once
    run_step(scheduler, KVConnectorOutput(finished_sending=frozenset("p")))
    assert "p" not in scheduler.requests
    assert not scheduler.has_requests()


def test_an_aborted_prefill_hands_no_blocks_to_write() -> None:
    scheduler = push_scheduler()
    scheduler.add_request(prefill("p", range(10, 50), max_tokens=4))
    run_step(scheduler)
    scheduler.finish_requests("p", RequestStatus.FINISHED_ABORTED)
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_not_processed == {"p"} and meta.push_finished_blocks == {}


def test_a_failed_write_starts_over_locally_under_recompute() -> None:
    scheduler = push_scheduler(policy="recompute")
    scheduler.add_request(decode("d", range(10, 20)))
    run_step(scheduler)
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d"),
                                          failed_recving=frozenset("d")))
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {"d": 10} and meta.push_registrations == {}  # no second registration


def test_the_integrity_check_refuses_blocks_held_for_a_write_no_read_awaits() -> None:
    scheduler = push_scheduler()
    connector = scheduler.connector
    assert isinstance(connector, NixlPushConnectorScheduler)
    connector._written["p"] = ([1],)
    with pytest.raises(IntegrityError, match="no read is awaited"):
        connector.check_integrity()


def test_the_transfer_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="transfer_mode: must be 'pull' or 'push'"):
        NixlSettings(transfer_mode="write")
