"""Turn-2 readback (`NixlSettings.bidirectional`, upstream's `bidirectional_kv_xfer`), step
by step with exact block ids: a decode side keeps its blocks when it finishes and hands on
what the next turn's prefill reads back; that prefill pulls the decode side's tokens past its
local hit, unless fewer than the recompute threshold are missing; aborted decode sides keep
nothing."""

from __future__ import annotations

from impl.connector.nixl_metadata import PullOrder
from impl.connector.types import (
    FinishedTransfer,
    KVConnectorOutput,
    NixlSettings,
    RemoteTransfer,
)
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from tests.sched.test_nixl_connector import BLOCK, decode, run_step


def readback_scheduler(threshold: int = 4) -> Scheduler:
    return make_scheduler(24, block_size=BLOCK, max_num_batched_tokens=64,
                          kv_connector=NixlSettings(bidirectional=True,
                                                    recompute_threshold=threshold))


def turn_two(request_id: str, prompt: range, tokens: int) -> Request:
    return make_request(request_id, prompt, BLOCK, max_tokens=1, kv_transfer=RemoteTransfer(
        do_remote_decode=True, readback_tokens=tokens))


def test_a_decode_side_keeps_its_blocks_for_the_next_turn() -> None:
    scheduler = readback_scheduler()
    scheduler.add_request(decode("d", range(10, 20), max_tokens=2))
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_in_batch == {"d"}  # a decode side joins the batch too
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    outputs = run_step(scheduler)[2] + run_step(scheduler)[2]
    assert [o.kv_transfer_params for o in outputs] == [
        None, FinishedTransfer(((1, 2, 3),), 11, None, readback=True)]
    assert "d" in scheduler.requests  # held for the read back
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_send == ["d"]
    run_step(scheduler, KVConnectorOutput(finished_sending=frozenset("d")))
    assert "d" not in scheduler.requests


def test_an_aborted_decode_side_keeps_nothing() -> None:
    scheduler = readback_scheduler()
    scheduler.add_request(decode("d", range(10, 20), max_tokens=4))
    run_step(scheduler)
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    run_step(scheduler)
    scheduler.finish_requests("d", RequestStatus.FINISHED_ABORTED)
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_not_processed == {"d"} and meta.reqs_to_send == []
    assert "d" not in scheduler.requests


def test_a_second_turn_reads_back_past_its_local_hit() -> None:
    scheduler = readback_scheduler()
    scheduler.add_request(make_request("warm", range(10, 19), BLOCK, max_tokens=1))
    run_step(scheduler)  # caches blocks 1 and 2 (tokens 10..17)
    scheduler.add_request(turn_two("p", range(10, 30), tokens=16))
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {}  # waits for 8 tokens read back (16 kept, 8 hit)
    assert meta.reqs_to_recv == {"p": PullOrder(([3, 4],), (2,), True)}  # the 8 tokens
    assert meta.reqs_in_batch == {"p"}
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("p")))
    scheduled, _, _ = run_step(scheduler)
    assert scheduled == {"p": 4}  # the rest of its prompt, past the 16 tokens


def test_a_readback_under_the_threshold_is_recomputed() -> None:
    scheduler = readback_scheduler(threshold=12)
    scheduler.add_request(make_request("warm", range(10, 19), BLOCK, max_tokens=1))
    run_step(scheduler)
    scheduler.add_request(turn_two("p", range(10, 30), tokens=16))  # 8 missing < 12
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {"p": 12}
    # Nothing to pull: the order only lets the peer free its blocks. The count is taken after
    # the allocation, which already hashed the blocks this step computes.
    assert meta.reqs_to_recv == {"p": PullOrder((), (5,), False)}


def test_without_bidirectional_a_decode_side_frees_at_once() -> None:
    scheduler = make_scheduler(24, block_size=BLOCK, max_num_batched_tokens=64,
                               kv_connector=NixlSettings())
    scheduler.add_request(decode("d", range(10, 20), max_tokens=1))
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_in_batch == set()
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    outputs = run_step(scheduler)[2]
    assert [o.kv_transfer_params for o in outputs] == [None]
    assert "d" not in scheduler.requests


def test_a_prefill_that_loaded_its_whole_prompt_counts_it_all_as_cached() -> None:
    """The cached tokens handed on are the first admission's (local hit + loaded), not the
    computed tokens left after the last one is recomputed to sample from."""
    scheduler = readback_scheduler(threshold=0)
    scheduler.add_request(turn_two("p", range(10, 18), tokens=8))
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"p": PullOrder(([1, 2],), (0,), True)}
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("p")))
    scheduled, _, outputs = run_step(scheduler)
    assert scheduled == {"p": 1}  # the last token, recomputed
    assert [o.kv_transfer_params for o in outputs] == [FinishedTransfer(((1, 2),), 8, 8)]
