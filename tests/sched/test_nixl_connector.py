"""The NIXL prefill/decode connector's scheduler side (`impl.connector.nixl`) inside the
scheduler, step by step, with exact block ids: a decode-side request pulls its prompt into the
blocks its local hit does not cover and waits for the pull; a prefill-side request keeps its
blocks for the peer's read and hands on what to read; a whole pull failing under each policy;
aborts before and during a pull; and the integrity check over the finished requests that keep
their blocks."""

from __future__ import annotations

import pytest

from impl.connector.nixl import NixlConnectorScheduler
from impl.connector.nixl_metadata import NixlMetadata, PullOrder
from impl.connector.types import (
    FinishedTransfer,
    KVConnectorOutput,
    NixlSettings,
    RemoteTransfer,
)
from impl.sched.output import EngineCoreOutput, ModelRunnerOutput
from impl.sched.request import Request, RequestStatus
from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler
from vtwin.errors import IntegrityError

BLOCK = 4


def nixl_scheduler(num_blocks: int = 24, policy: str = "fail") -> Scheduler:
    return make_scheduler(num_blocks, block_size=BLOCK, max_num_batched_tokens=64,
                          kv_connector=NixlSettings(policy))


def decode(request_id: str, prompt: range, max_tokens: int = 3) -> Request:
    return make_request(request_id, prompt, BLOCK, max_tokens=max_tokens,
                        kv_transfer=RemoteTransfer(do_remote_prefill=True))


def prefill(request_id: str, prompt: range, max_tokens: int = 1) -> Request:
    return make_request(request_id, prompt, BLOCK, max_tokens=max_tokens,
                        kv_transfer=RemoteTransfer(do_remote_decode=True))


def run_step(scheduler: Scheduler, report: KVConnectorOutput | None = None,
             ) -> tuple[dict[str, int], NixlMetadata, list[EngineCoreOutput]]:
    """One step with the worker's `report`; samples a token for every request whose input is
    complete, then checks the scheduler and the connector."""
    output = scheduler.schedule()
    req_ids = list(output.num_scheduled_tokens)
    sampled = [[7] if scheduler.requests[r].num_computed_tokens >= scheduler.requests[r].num_tokens
               else [] for r in req_ids]
    outputs = scheduler.update_from_output(output, ModelRunnerOutput(
        req_ids, {r: i for i, r in enumerate(req_ids)}, sampled,
        kv_connector_output=report or KVConnectorOutput()))
    scheduler.check_integrity()
    meta = output.kv_connector_metadata
    assert isinstance(meta, NixlMetadata)
    return dict(output.num_scheduled_tokens), meta, outputs


def test_a_decode_request_pulls_its_prompt_then_recomputes_the_last_token() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(decode("d", range(10, 20)))  # 10 tokens: 3 blocks
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {}
    assert meta.reqs_to_recv == {"d": PullOrder(([1, 2, 3],), (0,), True)}
    assert scheduler.requests["d"].status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert scheduler.connector is not None and scheduler.connector.loading_finished() == set()
    scheduled, meta, _ = run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    assert scheduled == {} and meta.reqs_to_recv == {}  # one pull per request
    scheduled, _, outputs = run_step(scheduler)
    assert scheduled == {"d": 1}  # the prompt's last token, to sample from
    assert [(o.request_id, o.kv_transfer_params) for o in outputs] == [("d", None)]


def test_a_decode_request_frees_its_blocks_when_it_finishes() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(decode("d", range(10, 20), max_tokens=2))
    run_step(scheduler)
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    outputs = run_step(scheduler)[2] + run_step(scheduler)[2]
    assert [o.finish_reason for o in outputs] == [None, "length"]
    assert "d" not in scheduler.requests  # a decode side holds nothing for a peer
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == 23
    run_step(scheduler)  # reports the finish to the worker
    assert not scheduler.has_requests()  # no transfer keeps the engine stepping


def test_a_pull_of_one_token_past_a_hit_of_all_but_the_last() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(make_request("warm", range(10, 19), BLOCK, max_tokens=1))
    run_step(scheduler)  # caches tokens 10..17 (two blocks)
    scheduler.add_request(decode("d", range(10, 19)))  # 9 tokens: 8 hit, 1 to pull
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"d": PullOrder(([3],), (2,), True)}
    assert scheduler.requests["d"].status == RequestStatus.WAITING_FOR_REMOTE_KVS


def test_a_request_that_skips_the_prefix_cache_pulls_nothing_and_runs() -> None:
    """A request that may not read cached KV (upstream: prompt logprobs) is told no external
    tokens either: its order only releases the peer's blocks, and it computes its prompt."""
    scheduler = nixl_scheduler()
    request = decode("d", range(10, 20))
    request.skip_reading_prefix_cache = True
    scheduler.add_request(request)
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {"d": 10}
    # The count is taken after the allocation, which already hashed the two full blocks the
    # step computes.
    assert meta.reqs_to_recv == {"d": PullOrder((), (2,), False)}


def test_a_report_for_a_pull_the_connector_does_not_know_is_ignored() -> None:
    connector = nixl_scheduler().connector
    assert isinstance(connector, NixlConnectorScheduler)
    connector.update_connector_output(KVConnectorOutput(finished_recving=frozenset({"x"})))
    assert connector.loading_finished() == set()


def test_a_pull_skips_the_blocks_of_the_local_hit() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(make_request("warm", range(10, 19), BLOCK, max_tokens=1))
    run_step(scheduler)  # caches blocks 1 and 2 (8 tokens)
    scheduler.add_request(decode("d", range(10, 22)))
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"d": PullOrder(([3],), (2,), True)}  # 3: warm's freed tail


def test_a_prefill_keeps_its_blocks_until_the_peer_has_read_them() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(make_request("warm", range(10, 19), BLOCK, max_tokens=1))
    run_step(scheduler)
    scheduler.add_request(prefill("p", range(10, 21)))  # 11 tokens, 8 of them cached
    scheduled, meta, outputs = run_step(scheduler)
    assert scheduled == {"p": 3} and meta.reqs_in_batch == {"p"}
    (out,) = outputs
    assert (out.finish_reason, out.kv_transfer_params) == (
        "length", FinishedTransfer(((1, 2, 3),), 11, 8))
    assert "p" in scheduler.requests  # held for the read
    assert scheduler.connector is not None and scheduler.connector.loading_finished() == {"p"}
    free = scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_send == ["p"]
    run_step(scheduler, KVConnectorOutput(finished_sending=frozenset("p")))
    assert "p" not in scheduler.requests
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free + 3


def test_a_prefill_with_earlier_outputs_hands_on_no_cached_count() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(prefill("p", range(10, 21), max_tokens=2))
    _, _, first = run_step(scheduler)
    _, _, second = run_step(scheduler)
    assert [o.kv_transfer_params for o in first + second] == [
        None, FinishedTransfer(((1, 2, 3),), 12, None)]


def test_an_aborted_prefill_frees_at_once_and_is_not_processed() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(prefill("p", range(10, 50), max_tokens=4))
    run_step(scheduler)
    scheduler.finish_requests("p", RequestStatus.FINISHED_ABORTED)
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_not_processed == {"p"} and meta.reqs_to_send == []
    assert "p" not in scheduler.requests


def test_a_request_aborted_before_its_pull_releases_the_peer() -> None:
    scheduler = nixl_scheduler(num_blocks=8)
    scheduler.add_request(make_request("big", range(100, 124), BLOCK, max_tokens=4))
    scheduler.add_request(decode("d", range(10, 30)))  # 5 blocks: no room behind "big"
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {}
    scheduler.finish_requests("d", RequestStatus.FINISHED_ABORTED)
    _, meta, _ = run_step(scheduler)
    assert meta.reqs_to_recv == {"d": PullOrder((), (), False)}


def test_a_request_aborted_mid_pull_keeps_its_blocks_until_the_pull_lands() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(decode("d", range(10, 20)))
    run_step(scheduler)
    scheduler.finish_requests("d", RequestStatus.FINISHED_ABORTED)
    assert scheduler.connector is not None and scheduler.connector.loading_finished() == {"d"}
    scheduler.check_integrity()
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d")))
    assert "d" not in scheduler.requests
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == 23


def test_a_failed_pull_errors_the_request_under_fail() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(decode("d", range(10, 20)))
    run_step(scheduler)
    _, _, outputs = run_step(scheduler, KVConnectorOutput(
        finished_recving=frozenset("d"), failed_recving=frozenset("d"),
        invalid_block_ids=frozenset({1, 2, 3})))
    assert [(o.request_id, o.finish_reason) for o in outputs] == [("d", "error")]
    assert "d" not in scheduler.requests


def test_a_failed_pull_starts_over_locally_under_recompute() -> None:
    scheduler = nixl_scheduler(policy="recompute")
    scheduler.add_request(decode("d", range(10, 20)))
    run_step(scheduler)
    run_step(scheduler, KVConnectorOutput(finished_recving=frozenset("d"),
                                          failed_recving=frozenset("d")))
    scheduled, meta, _ = run_step(scheduler)
    assert scheduled == {"d": 10} and meta.reqs_to_recv == {}  # the whole prompt, no pull


def test_a_connector_reset_succeeds_with_nothing_to_forget() -> None:
    scheduler = nixl_scheduler()
    assert scheduler.reset_prefix_cache(reset_connector=True)
    scheduler.add_request(decode("d", range(10, 20)))
    run_step(scheduler)
    assert not scheduler.reset_prefix_cache(reset_connector=True)  # the pull holds blocks
    assert scheduler.reset_connector_cache()


def test_the_integrity_check_refuses_a_request_both_pulling_and_held() -> None:
    scheduler = nixl_scheduler()
    scheduler.add_request(decode("d", range(10, 20)))
    run_step(scheduler)
    connector = scheduler.connector
    assert isinstance(connector, NixlConnectorScheduler)
    connector._awaiting_read.add("d")
    with pytest.raises(IntegrityError, match="both pulling and awaiting a read"):
        connector.check_integrity()
    with pytest.raises(IntegrityError, match="load of d marked finished"):
        scheduler.check_integrity()  # and "d" is not finished


def test_groups_it_does_not_model_are_refused_by_name() -> None:
    """Hybrid layouts are modelled (`tests/sched/test_nixl_hybrid.py`); a bounded-replay
    window is not."""
    from impl.core.specs import KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec

    window = SlidingWindowSpec(BLOCK, sliding_window=8, bounded_replay=True)
    config = KVCacheConfig(16, (KVCacheGroupSpec(("l0",), window),))
    with pytest.raises(ValueError, match="with a sliding_window_8_replay group"):
        NixlConnectorScheduler(config)
